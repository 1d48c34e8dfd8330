/**
 * Runs the real CLI from source (no build needed): `node --import tsx test/helpers/cli-entry.ts ...`.
 */
import { run } from '../../src/cli.js';

await run(process.argv);
