import type pg from 'pg';
import { checkOut } from './pg-util.js';

/** A row as COPY's text format gives it: each field's text, null for NULL. */
export type CopiedRow = (string | null)[];

/** The part of pg's connection a query submitted to the client writes to. */
interface Connection {
  query(text: string): void;
  sendCopyFail(message: string): void;
}

/**
 * The rows of `select` (its values written in: COPY takes no parameters, see pg-util.ts `inlineParams`)
 * through `COPY (select) TO STDOUT`, on a connection of `pool`.
 *
 * Why not a SELECT: the driver decodes each field of each row into a string of its own and hands it
 * to a type parser, which for a replay of 10,000 events of 10 columns is most of the time the replay
 * takes (bench/pg-store.ts: the raw driver's read of them took longer than the server's work). COPY
 * sends a row as one line: the lines are gathered into one buffer, decoded once and split, and only a
 * field holding a backslash is unescaped.
 */
export async function copyOutRows(pool: pg.Pool, select: string): Promise<CopiedRow[]> {
  const { client, release } = await checkOut(pool);
  let broken = false;
  try {
    return parseCopyText(await copyOut(client, `COPY (${select}) TO STDOUT`));
  } catch (error) {
    broken = true;
    throw error;
  } finally {
    release(broken);
  }
}

/** The text COPY ... TO STDOUT sends, gathered as it comes (pg reuses the buffer each message is in). */
function copyOut(client: pg.ClientBase, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let gathered = Buffer.allocUnsafe(1 << 16);
    let length = 0;
    let settled = false;
    const submittable = {
      text,
      submit(connection: Connection) {
        connection.query(text);
      },
      /** Called once with the outcome; pg wraps it with its query timeout (`query_timeout`). */
      callback(error: Error | null) {
        if (settled) return;
        settled = true;
        if (error === null) resolve(gathered.toString('utf8', 0, length));
        else reject(error);
      },
      handleCopyData(message: { chunk: Buffer }) {
        const needed = length + message.chunk.length;
        if (needed > gathered.length) {
          const larger = Buffer.allocUnsafe(Math.max(needed, gathered.length * 2));
          gathered.copy(larger, 0, 0, length);
          gathered = larger;
        }
        length += message.chunk.copy(gathered, length);
      },
      handleCopyInResponse(connection: Connection) {
        connection.sendCopyFail('this query only reads');
      },
      handleRowDescription() {},
      handleDataRow() {},
      handleCommandComplete() {},
      handleEmptyQuery() {},
      handlePortalSuspended() {},
      handleError(error: Error) {
        submittable.callback(error);
      },
      handleReadyForQuery() {
        submittable.callback(null);
      },
    };
    client.query(submittable as unknown as pg.Submittable);
  });
}

/** What COPY's text format writes after a backslash, for each character it escapes. */
const UNESCAPED: Readonly<Record<string, string>> = {
  b: '\b',
  f: '\f',
  n: '\n',
  r: '\r',
  t: '\t',
  v: '\v',
};

/**
 * COPY's text format read back: a line a row, a tab between fields, `\N` for NULL. Newlines and tabs
 * in a value are escaped, so splitting on them is exact; COPY TO writes no octal or hex escapes, and a
 * backslash before any other character stands for that character.
 */
export function parseCopyText(text: string): CopiedRow[] {
  const lines = text.split('\n');
  lines.pop(); // after the last row's newline
  return lines.map((line) => (line.includes('\\') ? line.split('\t').map(unescaped) : line.split('\t')));
}

function unescaped(field: string): string | null {
  if (field === '\\N') return null;
  if (!field.includes('\\')) return field;
  return field.replace(/\\(.)/g, (_, char: string) => UNESCAPED[char] ?? char);
}
