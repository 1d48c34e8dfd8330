import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'vitest';
import { freshDatabase, postgresForFile, postgresTestsRun } from '../helpers/postgres.js';
import { tempDir } from '../helpers/tmp.js';
import { notLinux, postgresStoreReader } from './durable-helpers.js';
import { killDuringTurns } from './restart-rounds.js';

/*
 * The restart property of restart-property.test.ts on `metis serve --store postgres://…`, which runs on
 * PostgreSQL alone: recovery reads what the crash left from it, and the test reads it there. Seed
 * printed; METIS_PROPERTY_SEED replays one.
 */

const SEED = Number(process.env.METIS_PROPERTY_SEED ?? Math.floor(Math.random() * 2 ** 31));
const pg = postgresForFile();

describe.skipIf(!postgresTestsRun || notLinux('restart-property-postgres'))(
  'durable turns on PostgreSQL (property)',
  () => {
    it(`every turn completes, no side effect twice, seq whole (seed ${SEED})`, async () => {
      console.log(`restart-property-postgres seed: ${SEED} (replay with METIS_PROPERTY_SEED=${SEED})`);
      const url = freshDatabase(pg);
      const home = tempDir();
      const configPath = join(home, 'metis.config.json');
      writeFileSync(
        configPath,
        JSON.stringify({
          server: { shutdown_timeout_ms: 1500 },
          runtime: {
            tool_confirmation: { execute: 'allow' },
            scripted: { token_delay_ms: 1, slow_token_delay_ms: 20, slow_tokens: 150 },
          },
        }),
      );
      const args = ['--store', url, '--config', configPath];
      await killDuringTurns({
        home,
        args,
        openStore: () => postgresStoreReader(pg.psql, url),
        seed: SEED,
        rounds: 2,
      });
      const dbName = new URL(url).pathname.slice(1);
      // PostgreSQL holds each session whole too: as many events as its highest seq.
      const holes = pg.psql(
        'SELECT count(*) FROM (SELECT session_id FROM events GROUP BY session_id HAVING count(*) <> max(seq)) s',
        dbName,
      );
      if (holes.trim() !== '0') throw new Error(`sessions with a seq hole in PostgreSQL: ${holes.trim()}`);
    }, 120_000);
  },
);
