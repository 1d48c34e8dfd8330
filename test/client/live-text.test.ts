import { describe, expect, it } from 'vitest';
import { liveTextWriter, type TextOutput } from '../../src/client/live-text.js';
import { type Frame, initialState, reduce } from '../../src/client/reducer.js';
import { traceFrames } from '../helpers/traces.js';

/** Feeds frames through the reducer and the writer, as `tail` does; returns everything written. */
function write(
  frames: readonly Frame[],
  output: Omit<TextOutput, 'write'>,
  env: NodeJS.ProcessEnv = {},
): string {
  let raw = '';
  const out: TextOutput = { ...output, write: (text: string) => (raw += text) };
  const sessionId = frames.find((f) => f.type === 'event')!.event.session_id as string;
  const writeText = liveTextWriter(sessionId, { out, env });
  let state = initialState;
  for (const frame of frames) {
    state = reduce(state, frame);
    writeText({ kind: 'frame', frame }, state);
  }
  return raw;
}

/**
 * What a terminal shows after `raw`: lines of text, where "cursor up" from the start of a line moves
 * to the line above and "erase line" empties it. Colour codes take no room and are dropped.
 */
function screen(raw: string): string[] {
  const lines = [''];
  // biome-ignore lint/suspicious/noControlCharactersInRegex: terminal escape sequences
  for (const token of raw.split(/(\u001b\[\d*[A-Za-z]|\n)/)) {
    if (token === '\n') lines.push('');
    else if (token === '\u001b[1A') {
      expect(lines.at(-1), 'cursor up only from the start of a line').toBe('');
      lines.pop();
    } else if (token === '\u001b[2K') lines[lines.length - 1] = '';
    else if (!token.startsWith('\u001b[')) lines[lines.length - 1] += token;
  }
  return lines;
}

const tty = { isTTY: true, columns: 80 };
const NO_COLOR = { NO_COLOR: '1' };

describe('live text: a tool line whose status changes', () => {
  it('on a terminal, the result replaces the "running" line: one line per tool call', () => {
    const lines = screen(write(traceFrames('tool-use'), tty, NO_COLOR));
    const toolLines = lines.filter((line) => line.includes('current_time'));
    expect(toolLines).toHaveLength(1);
    expect(toolLines[0]).toMatch(/^ {2}✓ current_time ok \(\d+ ms\)$/);
    // The lines around it are untouched: the first message above, the second message below.
    const at = lines.indexOf(toolLines[0]!);
    expect(lines[at - 1]).toBe('assistant: Let me check the time.');
    expect(lines[at + 1]).toMatch(/^assistant: The tool returned/);
  });

  it('in colour too, and for a cancelled tool', () => {
    const raw = write(traceFrames('cancel-mid-tool'), tty);
    expect(raw).toContain('\u001b[33m'); // colour is on
    const toolLines = screen(raw).filter((line) => line.includes('shell'));
    expect(toolLines).toEqual([expect.stringMatching(/^ {2}✗ cancelled shell \(\d+ ms\)$/)]);
  });

  it('a tool that ran but reported failure (success: false) is not shown as ok', () => {
    const frames = traceFrames('tool-use').map((frame) =>
      frame.type === 'event' && frame.event.type === 'tool.completed'
        ? { ...frame, event: { ...frame.event, payload: { ...frame.event.payload, success: false } } }
        : frame,
    );
    const toolLines = screen(write(frames, tty, NO_COLOR)).filter((line) => line.includes('current_time'));
    expect(toolLines).toEqual([
      expect.stringMatching(/^ {2}✗ current_time ran, reported an error \(\d+ ms\)$/),
    ]);
  });

  it('in a pipe, both lines stay and no escape sequence is written', () => {
    const raw = write(traceFrames('tool-use'), { isTTY: false });
    expect(raw).not.toContain('\u001b');
    const toolLines = raw.split('\n').filter((line) => line.includes('current_time'));
    expect(toolLines).toEqual(['  ⋯ current_time running', expect.stringMatching(/^ {2}✓ current_time ok/)]);
  });

  it('keeps the "running" line when something was printed after it, or when it wrapped; 0 columns is 80', () => {
    const frames = traceFrames('tool-use');
    const called = frames.findIndex((f) => f.type === 'event' && f.event.type === 'tool.called');
    const between: Frame = {
      type: 'event',
      event: {
        ...frames[called]!.event,
        id: `${frames[called]!.event.id}X`,
        type: 'tool.confirmation_requested',
        payload: {
          tool_use_id: 'tu_other',
          tool_name: 'shell',
          command_summary: 'ls',
          confirmation_request_id: 'conf_1',
        },
      },
    };
    const interleaved = [...frames.slice(0, called + 1), between, ...frames.slice(called + 1)];
    const raw = write(interleaved, tty, NO_COLOR);
    expect(raw).not.toContain('\u001b[1A');
    expect(screen(raw).filter((line) => line.includes('current_time'))).toHaveLength(2);

    // A terminal that reports no size (a pty under `script`) counts as 80 wide, not as 0.
    const unsized = write(frames, { isTTY: true, columns: 0 }, NO_COLOR);
    expect(screen(unsized).filter((line) => line.includes('current_time'))).toHaveLength(1);

    const narrow = write(frames, { isTTY: true, columns: 20 }, NO_COLOR);
    expect(narrow).not.toContain('\u001b[1A');
    expect(screen(narrow).filter((line) => line.includes('current_time'))).toHaveLength(2);
  });
});

describe('live text: reconnecting (issue 17 obs. 3)', () => {
  const reconnecting = (attempt: number) =>
    ({
      kind: 'status',
      status: 'reconnecting',
      detail: `http://127.0.0.1:9 (attempt ${attempt}, next in 0.4 s)`,
    }) as const;

  function writeItems(items: readonly Parameters<ReturnType<typeof liveTextWriter>>[0][], output: object) {
    let raw = '';
    const writeText = liveTextWriter('sess_x', {
      out: { ...output, write: (t: string) => (raw += t) },
      env: NO_COLOR,
    });
    for (const item of items) writeText(item, initialState);
    return raw;
  }

  it('on a terminal, one line that updates: attempt and wait, replaced by the next attempt', () => {
    const lines = screen(writeItems([reconnecting(1), reconnecting(2), reconnecting(3)], tty));
    expect(lines.filter((line) => line.includes('reconnecting'))).toEqual([
      'reconnecting… http://127.0.0.1:9 (attempt 3, next in 0.4 s)',
    ]);
  });

  it('in a pipe, a line per attempt (logs keep them all)', () => {
    const raw = writeItems([reconnecting(1), reconnecting(2)], { isTTY: false });
    expect(raw).not.toContain('\u001b[1A');
    expect(screen(raw).filter((line) => line.includes('reconnecting'))).toHaveLength(2);
  });
});

describe('live text: colour by NO_COLOR, FORCE_COLOR and TERM (issue 17 obs. 7)', () => {
  const frames = traceFrames('tool-use');
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matches the colour codes paint() writes
  const coloured = (raw: string) => /\u001b\[\d+m/.test(raw);
  it('a terminal gets colour; NO_COLOR takes it away, whatever FORCE_COLOR says', () => {
    expect(coloured(write(frames, tty, {}))).toBe(true);
    expect(coloured(write(frames, tty, { NO_COLOR: '1', FORCE_COLOR: '1' }))).toBe(false);
  });
  it('FORCE_COLOR colours a pipe; FORCE_COLOR=0 and TERM=dumb keep a terminal plain', () => {
    expect(coloured(write(frames, { isTTY: false }, {}))).toBe(false);
    expect(coloured(write(frames, { isTTY: false }, { FORCE_COLOR: '1' }))).toBe(true);
    expect(coloured(write(frames, tty, { FORCE_COLOR: '0' }))).toBe(false);
    expect(coloured(write(frames, tty, { TERM: 'dumb' }))).toBe(false);
  });
  it('TERM=dumb never moves the cursor', () => {
    expect(write(frames, tty, { TERM: 'dumb' })).not.toContain('\u001b[1A');
    expect(write(frames, tty, {})).toContain('\u001b[1A');
  });
});
