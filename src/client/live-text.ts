import type { ClientItem } from './client.js';
import { ModelWaitLine, REPLACE_LAST_LINE } from './model-wait.js';
import type { ConversationState, WireEvent } from './reducer.js';
import { renderItem } from './render-text.js';

/** Where `metis serve` listens unless told otherwise. */
export const DEFAULT_URL = 'http://127.0.0.1:8421';

/** Where live text goes: a terminal (isTTY, columns) or a pipe. */
export interface TextOutput {
  write(text: string): unknown;
  readonly isTTY?: boolean;
  readonly columns?: number;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: matches the colour codes paint() writes
const ANSI_STYLE = /\u001b\[\d+m/g;

/**
 * Whether to colour text for `out`, by the conventions of no-color.org and force-color.org:
 * `NO_COLOR` (non-empty) never, then `FORCE_COLOR` (anything but `0`/`false`) always, then a terminal
 * that is not `TERM=dumb`.
 */
export function wantsColor(out: { readonly isTTY?: boolean }, env: NodeJS.ProcessEnv): boolean {
  if (env.NO_COLOR) return false;
  const force = env.FORCE_COLOR;
  if (force !== undefined) return force !== '0' && force !== 'false';
  return out.isTTY === true && env.TERM !== 'dumb';
}

/**
 * Writes client items as the human view of `tail`, `send --follow` and `demo`. Colour as `wantsColor`
 * says. On a TTY a tool's result takes the place of its "running" line when that is
 * still the last line on screen (nothing printed since, and it did not wrap); anywhere else, and in a
 * pipe, the result gets a line of its own, so logs keep both.
 */
/** Events that end the wait for a model call's first output: its output, its end, or the turn's. */
const ENDS_WAIT = /^(message\.|text\.|thinking\.|tool\.use_|llm\.call_|turn\.)/;

export function liveTextWriter(
  sessionId: string,
  options: {
    readonly serverUrl?: string;
    readonly out?: TextOutput;
    readonly env?: NodeJS.ProcessEnv;
    /** The detailed view (RenderOptions.detailed). */
    readonly detailed?: boolean;
    /** How to pick another model where the text is shown (RenderOptions.modelChoice). */
    readonly modelChoice?: string;
  } = {},
): (item: ClientItem, state: ConversationState) => void {
  const { out = process.stdout, env = process.env } = options;
  const color = wantsColor(out, env);
  // The default server needs no --url in the commands printed for the user.
  const serverUrl = options.serverUrl === DEFAULT_URL ? undefined : options.serverUrl;
  // A dumb terminal cannot move the cursor: every line stays.
  const inPlace = out.isTTY === true && env.TERM !== 'dumb';
  /** The tool whose "running" line is the last complete line written, if any. */
  let runningToolOnLastLine: string | null = null;
  /** Whether the last line written is a "reconnecting…" line: the next one replaces it on a TTY. */
  let reconnectingOnLastLine = false;
  const wait = new ModelWaitLine(out, inPlace, (text) => (color ? `\u001b[2m${text}\u001b[22m` : text));
  return (item, state) => {
    const frameEvent =
      item.kind === 'frame' && item.frame.type === 'event' ? (item.frame.event as WireEvent) : null;
    if (frameEvent?.type === 'llm.call_started') wait.start(String(frameEvent.payload.model));
    const waitOver =
      frameEvent !== null && frameEvent.type !== 'llm.call_started' && ENDS_WAIT.test(frameEvent.type);
    const text = renderItem(item, state, sessionId, {
      color,
      serverUrl,
      detailed: options.detailed === true,
      ...(options.modelChoice === undefined ? {} : { modelChoice: options.modelChoice }),
    });
    if (text === '' && !waitOver) return;
    const erase = wait.before(waitOver);
    if (text === '') {
      if (erase !== '') out.write(`${erase}`);
      return;
    }
    if (erase !== '') out.write(erase);
    const reconnecting = item.kind === 'status' && item.status === 'reconnecting';
    const replaceReconnecting = inPlace && reconnecting && reconnectingOnLastLine;
    reconnectingOnLastLine = reconnecting;
    if (replaceReconnecting) {
      out.write(REPLACE_LAST_LINE + text);
      runningToolOnLastLine = null;
      return;
    }
    const event =
      item.kind === 'frame' && item.frame.type === 'event' ? (item.frame.event as WireEvent) : null;
    const toolUseId = (event?.payload.tool_use_id as string | undefined) ?? null;
    const isResult = event?.type === 'tool.completed' || event?.type === 'tool.failed';
    const replace = inPlace && isResult && toolUseId !== null && toolUseId === runningToolOnLastLine;
    out.write(replace ? REPLACE_LAST_LINE + text : text);
    // A terminal that reports no size (0 columns, as under `script`) is taken to be 80 wide.
    const fitsOneLine = text.replace(ANSI_STYLE, '').length - 1 <= (out.columns || 80);
    runningToolOnLastLine = event?.type === 'tool.called' && fitsOneLine ? toolUseId : null;
  };
}
