import { describe, expect, it } from 'vitest';
import { runsOnPostgresAlone } from '../../src/core/app/start-direct.js';
import { MetisConfigSchema } from '../../src/core/config/schema.js';

/**
 * `store.working_copy` unset: one server on PostgreSQL runs on it alone, plugins or not; a cluster node
 * keeps the working copy (the cluster does not run on PostgreSQL alone yet); a value set wins.
 */
const URL = 'postgres://metis@localhost/metis';
const onPostgresAlone = (input: Record<string, unknown>) =>
  runsOnPostgresAlone(MetisConfigSchema.parse(input));

describe('where metis serve runs when store.working_copy is unset', () => {
  it('one server on PostgreSQL: no working copy; the SQLite file: never', () => {
    expect(onPostgresAlone({ store: { url: URL } })).toBe(true);
    expect(onPostgresAlone({})).toBe(false);
    expect(onPostgresAlone({ store: { working_copy: false } })).toBe(false);
  });

  it('a cluster node keeps the working copy, unless told otherwise; plugins run on PostgreSQL alone', () => {
    const cluster = { nats: 'nats://localhost:4222' };
    expect(onPostgresAlone({ store: { url: URL }, cluster })).toBe(false);
    expect(onPostgresAlone({ store: { url: URL }, plugins: ['otel'] })).toBe(true);
    // Set, it is obeyed (start-direct refuses a cluster on PostgreSQL alone, by name).
    expect(onPostgresAlone({ store: { url: URL, working_copy: false }, cluster })).toBe(true);
    expect(onPostgresAlone({ store: { url: URL, working_copy: true } })).toBe(false);
  });
});
