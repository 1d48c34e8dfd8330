/**
 * How much of a tool's input a confirmation summary (`command_summary`, `input_summary`) carries.
 * Generous on purpose: a summary is what a user reads before allowing a call, so a real command fits
 * whole; only input past this bound is cut, and the cut says so (issue 13: a command of 286 characters
 * once showed 200, and the hidden tail ran after "allow").
 */
export const SUMMARY_MAX_CHARS = 4_000;

/**
 * `text` whole when it has at most `max` characters (code points); otherwise its first `max`, then an
 * explicit note of how many are missing and where the whole input is listed. Never a silent cut.
 */
export function boundedSummary(text: string, max = SUMMARY_MAX_CHARS): string {
  const chars = Array.from(text);
  if (chars.length <= max) return text;
  const missing = chars.length - max;
  return `${chars.slice(0, max).join('')}… [cut: ${missing} more characters not shown here; the whole input is listed by GET /sessions/{session}/confirmations and \`metis confirm <session>\`]`;
}
