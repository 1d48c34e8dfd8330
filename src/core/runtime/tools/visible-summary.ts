/**
 * A confirmation summary (`command_summary`, `input_summary`) as it goes out in
 * `tool.confirmation_requested`: every control character shown as a visible sign instead of acting.
 * The summary is what a user reads before allowing a call, on any client (a terminal, a page, an AG-UI
 * app); a raw ESC could repaint the line and a raw CR overwrite what was shown (issue 34). The tool's
 * input, which is what runs and what `input_hash` covers, is never changed.
 *
 *   C0 (U+0000–U+001F, LF and TAB included) → its Control Pictures sign, U+2400 + code (ESC → ␛,
 *   CR → ␍, LF → ␊); DEL → ␡ (U+2421); C1 (U+0080–U+009F) and the bidi controls (U+200E, U+200F,
 *   U+202A–U+202E, U+2066–U+2069), which have no sign → the text `\uXXXX`.
 *
 * Signs rather than `\x1b`-style text for C0: a shell command may contain the text `\x1b` or `\n`
 * itself (printf), and a raw LF separates two commands where the text `\n` does not, so a text escape
 * could make two different commands look alike (docs/decisions.md "Control characters in summaries").
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const CONTROLS = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

export function visibleSummary(text: string): string {
  return text.replace(CONTROLS, signOf);
}

function signOf(char: string): string {
  const code = char.charCodeAt(0);
  if (code <= 0x1f) return String.fromCharCode(0x2400 + code);
  if (code === 0x7f) return '\u2421';
  return `\\u${code.toString(16).padStart(4, '0')}`;
}
