-- What a model call's price depends on beside its tokens, kept on its row so that `reprice` prices it as
-- it ran: the speed the producer reported, where it was not the standard one (Anthropic's fast mode costs
-- a multiple of the standard price; NULL: the standard speed, as every call stored before this was priced),
-- the web searches the provider ran for the call, charged per search, and where its inference was
-- confined to (Anthropic's US-only inference, "us", costs more; NULL: the default, global routing).
ALTER TABLE llm_calls ADD COLUMN speed TEXT;
ALTER TABLE llm_calls ADD COLUMN web_searches INTEGER NOT NULL DEFAULT 0;
ALTER TABLE llm_calls ADD COLUMN inference_geo TEXT;
