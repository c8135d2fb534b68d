-- What a model call's price depends on beside its tokens, kept on its row so that `reprice` prices it as
-- it ran: the speed the producer reported, where it was not the standard one (Anthropic's fast mode costs
-- a multiple of the standard price). NULL: the standard speed, as every call stored before this was priced.
ALTER TABLE llm_calls ADD COLUMN speed TEXT;
