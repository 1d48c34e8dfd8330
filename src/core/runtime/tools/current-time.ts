import { z } from 'zod';
import { defineTool } from './tool.js';

/** `2025-03-01T14:05:09+01:00`: the local wall-clock time with its UTC offset. */
function localIsoWithOffset(now: Date): string {
  const offsetMinutes = -now.getTimezoneOffset();
  const sign = offsetMinutes >= 0 ? '+' : '-';
  const abs = Math.abs(offsetMinutes);
  const pad = (n: number) => String(n).padStart(2, '0');
  return (
    `${now.getFullYear()}-${pad(now.getMonth() + 1)}-${pad(now.getDate())}` +
    `T${pad(now.getHours())}:${pad(now.getMinutes())}:${pad(now.getSeconds())}` +
    `${sign}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}`
  );
}

/** The current time: ISO 8601 in UTC, the local timezone name and the local time with its offset. */
export const currentTimeTool = defineTool({
  name: 'current_time',
  description:
    'Returns the current date and time as ISO 8601 in UTC, the name of the local timezone and the local time with its UTC offset.',
  inputSchema: z.strictObject({}),
  sideEffects: 'none',
  repeatSafe: true,
  summarize: () => ({ input_summary: 'read the current time' }),
  async execute() {
    const now = new Date();
    const timezone = Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
    return {
      content: [
        `utc: ${now.toISOString()}`,
        `timezone: ${timezone}`,
        `local: ${localIsoWithOffset(now)}`,
      ].join('\n'),
    };
  },
});
