// agentledger gate for OpenClaw: asks the local agentledger daemon before every tool call
// and blocks the call when a configured budget gate says so.
//
// The daemon answers GET /v1/gate?session_key=…&tool=… with {decision, block, blockReason, …};
// that is what OpenClaw's before_tool_call hook returns to block a call.

const DEFAULT_URL = "http://127.0.0.1:9464";

export function createGate({ url = DEFAULT_URL, timeoutMs = 500, failClosed = false, fetchImpl = fetch, log } = {}) {
  const base = url.replace(/\/+$/, "");
  return async function beforeToolCall(event, ctx) {
    const sessionKey = ctx?.sessionKey ?? event?.sessionKey;
    const tool = event?.toolName ?? "";
    if (!sessionKey) return undefined; // nothing to measure against
    const query = new URLSearchParams({ session_key: sessionKey, tool });
    try {
      const response = await fetchImpl(`${base}/v1/gate?${query}`, { signal: AbortSignal.timeout(timeoutMs) });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const decision = await response.json();
      if (decision.block) return { block: true, blockReason: decision.blockReason };
      if (decision.decision === "warn") log?.warn?.(`agentledger: ${decision.reason}`);
      return undefined;
    } catch (error) {
      const reason = `agentledger daemon unreachable at ${base}: ${error?.message ?? error}`;
      if (failClosed) return { block: true, blockReason: `${reason} (the gate fails closed)` };
      log?.warn?.(reason);
      return undefined;
    }
  };
}

export default {
  id: "agentledger-gate",
  name: "agentledger gate",
  description: "Blocks tool calls once a session, agent or the whole gateway passes an agentledger budget.",
  register(api) {
    const config = api.pluginConfig ?? {};
    api.on("before_tool_call", createGate({
      url: config.url,
      timeoutMs: config.timeoutMs,
      failClosed: config.failClosed === true,
      log: api.logger,
    }), { priority: 100 });
  },
};
