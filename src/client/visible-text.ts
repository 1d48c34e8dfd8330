/**
 * Text that came from events (model output, tool input and output, error messages, names) made safe to
 * write to a terminal: every control character shows as an escape instead of acting. ESC could clear
 * the screen or repaint a line, CR could overwrite what was just printed, and bidi controls reorder
 * what is shown (issue 13: a confirmation must show exactly what will run).
 *
 *   ESC → `\x1b`, CR → `\r`, other C0 except LF and TAB → `\xNN`, DEL → `\x7f`,
 *   C1 (U+0080–U+009F) and bidi controls (U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) → `\uXXXX`.
 *
 * Each control is one code point, so escaping stream fragments (text deltas) one at a time is exact.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const INVISIBLE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

export function visibleText(text: string): string {
  return text.replace(INVISIBLE, escapeOne);
}

/** `visibleText` of anything: a non-string is shown as its `String()` form. */
export function visible(value: unknown): string {
  return visibleText(typeof value === 'string' ? value : String(value ?? ''));
}

function escapeOne(char: string): string {
  const code = char.charCodeAt(0);
  if (code === 0x0d) return '\\r';
  if (code <= 0x7f) return `\\x${code.toString(16).padStart(2, '0')}`;
  return `\\u${code.toString(16).padStart(4, '0')}`;
}

const JSON_INVISIBLE = /[\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/**
 * JSON text (`--json` output) with the characters JSON.stringify leaves raw but a terminal acts on
 * (DEL, C1, bidi controls) written as `\uXXXX` escapes: still the same JSON value.
 */
export function visibleJson(json: string): string {
  return json.replace(JSON_INVISIBLE, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
