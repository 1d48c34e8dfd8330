import type { ConversationState } from '../../../src/client/browser.js';
import { duration, usd } from '../format.js';
import type { TurnFigures } from '../session-model.js';

export type Message = ConversationState['messages'][number];
type Block = Message['blocks'][number];
type Tool = ConversationState['tools'][string];
type Turn = ConversationState['turns'][string];

export interface ToolResult {
  content: string;
  is_error: boolean;
}

/** The conversation, turn by turn: what the user asked, what the model said and did, what it cost. */
export function Conversation({
  state,
  figures,
  focus,
  stored,
}: {
  state: ConversationState;
  figures: Readonly<Record<string, TurnFigures>>;
  focus: string | null;
  /** What the stored conversation adds: the stream carries neither the user's text nor a tool's output. */
  stored: StoredConversation;
}) {
  const results = new Map<string, ToolResult>(stored.toolResults);
  for (const message of state.messages)
    for (const block of message.blocks)
      if (block.type === 'tool_result')
        results.set(block.tool_use_id, { content: block.content, is_error: block.is_error });
  // Turn ids are ULIDs: sorting them is their order. Messages outside a turn come first.
  const turnIds = [
    ...new Set([
      ...state.messages.map((message) => message.turn_id ?? ''),
      ...Object.values(state.turns)
        .filter((turn) => turn.session_id === state.session?.id || state.session === null)
        .map((turn) => turn.turn_id),
      ...stored.userMessages.keys(),
    ]),
  ].sort();
  if (turnIds.length === 0) return <p class="empty">No messages yet: send one below.</p>;
  return (
    <ol class="conversation" aria-label="Conversation">
      {turnIds.map((turnId) => {
        const turn = turnId === '' ? undefined : state.turns[turnId];
        const messages = state.messages.filter((message) => (message.turn_id ?? '') === turnId);
        const user = messages.find((message) => message.role === 'user') ?? stored.userMessages.get(turnId);
        return (
          <li
            key={turnId}
            id={turnId === '' ? undefined : `turn-${turnId}`}
            class={`turn${focus !== null && focus === turnId ? ' focused' : ''}`}
          >
            {user && <MessageView message={user} tools={state.tools} results={results} />}
            {messages
              .filter((message) => message.role === 'assistant')
              .map((message) => (
                <MessageView key={message.id} message={message} tools={state.tools} results={results} />
              ))}
            {turn && <TurnFooter turn={turn} figures={figures[turn.turn_id]} />}
          </li>
        );
      })}
    </ol>
  );
}

/** The parts of the stored conversation (`GET /sessions/{id}/messages`) the stream does not carry. */
export interface StoredConversation {
  readonly userMessages: ReadonlyMap<string, Message>;
  readonly toolResults: ReadonlyMap<string, ToolResult>;
}

export const NOTHING_STORED: StoredConversation = { userMessages: new Map(), toolResults: new Map() };

function MessageView({
  message,
  tools,
  results,
}: {
  message: Message;
  tools: ConversationState['tools'];
  results: Map<string, ToolResult>;
}) {
  return (
    <article class={`message ${message.role}`} data-message={message.id} data-status={message.status}>
      <header>
        <span class="role">{message.role === 'user' ? 'You' : (message.model ?? 'assistant')}</span>
        {message.status === 'streaming' && <span class="pill running">streaming…</span>}
        {message.status === 'cancelled' && <span class="pill warn">cut short</span>}
        {message.status === 'error' && <span class="pill error">failed</span>}
      </header>
      {message.blocks.map((block, index) => (
        <BlockView key={index} block={block} tools={tools} results={results} />
      ))}
    </article>
  );
}

function BlockView({
  block,
  tools,
  results,
}: {
  block: Block;
  tools: ConversationState['tools'];
  results: Map<string, ToolResult>;
}) {
  switch (block.type) {
    case 'text':
      return <p class="text">{block.text}</p>;
    case 'thinking':
      return (
        <details class="thinking">
          <summary>Thinking</summary>
          <p>{block.thinking}</p>
        </details>
      );
    case 'redacted_thinking':
      return <p class="thinking muted">(thinking withheld by the provider)</p>;
    case 'tool_use':
      return <ToolCard block={block} tool={tools[block.id]} result={results.get(block.id)} />;
    case 'tool_result':
      return null;
  }
}

function ToolCard({
  block,
  tool,
  result,
}: {
  block: Extract<Block, { type: 'tool_use' }>;
  tool: Tool | undefined;
  result: ToolResult | undefined;
}) {
  const status = tool?.status ?? 'requested';
  const input = block.input ?? tool?.input ?? block.partial_json;
  return (
    <details
      class={`tool ${status}`}
      open={status === 'waiting_for_approval' || status === 'failed'}
      data-tool={block.id}
    >
      <summary>
        <span class="tool-name">{block.name}</span>{' '}
        <span class={`pill ${status}`}>{status.replaceAll('_', ' ')}</span>
        {tool?.latency_ms != null && <span class="muted"> {duration(tool.latency_ms)}</span>}
        {tool?.worker_session_id && (
          <a class="muted" href={`#/sessions/${encodeURIComponent(tool.worker_session_id)}`}>
            {' '}
            worker {tool.worker_session_id}
          </a>
        )}
      </summary>
      <h4>Input</h4>
      <pre>{typeof input === 'string' ? input : JSON.stringify(input, null, 2)}</pre>
      {tool?.error_message && (
        <p class="error">
          {tool.error_class}: {tool.error_message}
        </p>
      )}
      {result && (
        <>
          <h4>{result.is_error ? 'Error output' : 'Output'}</h4>
          <pre class={result.is_error ? 'error' : undefined}>{result.content}</pre>
        </>
      )}
    </details>
  );
}

/** A turn whose last model call failed ends with `turn.completed` all the same: it reads as failed. */
function turnBadge(turn: Turn): string {
  return turn.status === 'completed' && turn.last_call_failed ? 'failed' : turn.status;
}

function TurnFooter({ turn, figures }: { turn: Turn; figures: TurnFigures | undefined }) {
  const badge = turnBadge(turn);
  return (
    <footer class="turn-footer" data-turn={turn.turn_id} data-turn-status={badge}>
      <span class={`pill ${badge}`}>{badge === 'in_flight' ? 'in flight' : badge}</span>
      {turn.chosen_model && (
        <span title="routing decision">
          routed to <strong>{turn.chosen_model}</strong>
          {turn.route_reason && <> ({turn.route_reason})</>}
        </span>
      )}
      {turn.cancel_reason && <span>cancelled: {turn.cancel_reason.replaceAll('_', ' ')}</span>}
      {turn.errors.map((error, index) => (
        <span key={index} class="error">
          model call failed ({error.error_class}): {error.message}
          {error.retry_count > 0 &&
            `, after ${error.retry_count} retr${error.retry_count === 1 ? 'y' : 'ies'}`}
        </span>
      ))}
      {figures && (
        <span>
          {figures.input_tokens.toLocaleString()} in / {figures.output_tokens.toLocaleString()} out tokens
        </span>
      )}
      {turn.cost_usd !== null && <span>{usd(turn.cost_usd)}</span>}
      {figures?.wall_time_seconds != null && <span>{duration(figures.wall_time_seconds * 1000)}</span>}
    </footer>
  );
}
