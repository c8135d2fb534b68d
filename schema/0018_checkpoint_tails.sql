-- With each checkpoint, the length and a hash of the bytes just before it (the last line read, up
-- to 64 KiB of it): reading goes on at a checkpoint only where the file still holds those bytes.
-- An older copy put back and written to since may well have a line end there; it seldom has the
-- same line. A row without them (checkpointed before this) is checked for a line end only.
ALTER TABLE files ADD COLUMN tail_len INTEGER NOT NULL DEFAULT 0;
ALTER TABLE files ADD COLUMN tail_hash BLOB;
