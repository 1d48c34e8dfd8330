import fc from 'fast-check';
import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { postgresClient } from '../../src/core/store/postgres/connect.js';
import { quoteLiteral } from '../../src/core/store/postgres/pg-util.js';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';

/**
 * quoteLiteral, the quoting of every value a group commit inlines (pg-writer-batch.ts): the text pg's
 * escapeLiteral gives, and PostgreSQL reading it back unchanged.
 */
const server = postgresForFile();

/** Strings dense in what quoting must get right: quotes, backslashes, line ends, non-ASCII. */
const awkward = fc.string({
  unit: fc.oneof(
    fc.constantFrom("'", '\\', '"', '\t', '\n', '\r', 'E', ' ', '{', '}', ',', 'é', '😀'),
    fc.string({ minLength: 1, maxLength: 3 }),
  ),
  maxLength: 40,
});

describe('quoteLiteral', () => {
  it('gives the same text as pg.escapeLiteral', () => {
    fc.assert(
      fc.property(awkward, (text) => {
        expect(quoteLiteral(text)).toBe(pg.escapeLiteral(text));
      }),
      { numRuns: 2_000 },
    );
  });
});

describe.runIf(postgresTestsRun)('quoteLiteral against PostgreSQL', () => {
  it('reads back as the text quoted, alone and in an ARRAY[…]', async () => {
    const client = postgresClient(freshDatabase(server), 'serve');
    await client.connect();
    onTestFinished(() => client.end());
    await fc.assert(
      fc.asyncProperty(fc.array(awkward, { minLength: 1, maxLength: 8 }), async (texts) => {
        const result = await client.query<{ first: string; all: string[] }>(
          `SELECT ${quoteLiteral(texts[0]!)}::text AS first, ARRAY[${texts.map(quoteLiteral).join(', ')}]::text[] AS all`,
        );
        expect(result.rows[0]).toEqual({ first: texts[0], all: texts });
      }),
      { numRuns: 200 },
    );
  });
});
