import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, expect, expectTypeOf, it } from 'vitest';
import type { RowWrite } from '../src/core/store/batch-committer.js';
import type { RowChange } from '../src/core/store/row-change.js';

/**
 * The floors of docs/architecture.md, read off the code's own imports: a file imports from its floor
 * and the floors below, never from one above. Files beside the floors (`core/errors.ts`, `core/config/`…)
 * belong to none and may be imported from anywhere.
 */
const FLOORS: readonly (readonly [string, number])[] = [
  ['src/core/events', 0],
  ['src/core/bus', 1],
  ['src/core/store', 2],
  ['src/core/runtime', 3],
  ['src/core/http', 4],
  ['src/core/stream', 5],
  ['src/core/api', 6],
  ['src/core/gateway', 6],
  ['src/core/cluster', 7],
  ['src/plugins', 7],
  ['src/core/app', 8],
  ['src/commands', 9],
  ['src/cli.ts', 10],
];

const ROOT = join(import.meta.dirname, '..');

function sourceFiles(folder: string): string[] {
  return readdirSync(folder).flatMap((name) => {
    const path = join(folder, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return /\.tsx?$/.test(name) ? [relative(ROOT, path)] : [];
  });
}

function floorOf(file: string): number | null {
  for (const [prefix, floor] of FLOORS) if (file === prefix || file.startsWith(`${prefix}/`)) return floor;
  return null;
}

/** Each relative import of `file`, as a path from the repository root with its `.ts` name. */
function importsOf(file: string): string[] {
  const text = readFileSync(join(ROOT, file), 'utf8');
  return [...text.matchAll(/(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']+)'/g)].map((match) =>
    relative(ROOT, join(ROOT, dirname(file), match[1]!)).replace(/\.js$/, '.ts'),
  );
}

const FILES = sourceFiles(join(ROOT, 'src'));

describe('architecture: the floors of docs/architecture.md', () => {
  it('reads every source file', () => {
    expect(FILES.length).toBeGreaterThan(200);
    expect(FILES.filter((file) => floorOf(file) !== null).length).toBeGreaterThan(200);
  });

  it('has no upward arrow: no floor imports a floor above it', () => {
    const upward = FILES.flatMap((file) => {
      const from = floorOf(file);
      if (from === null) return [];
      return importsOf(file)
        .filter((target) => (floorOf(target) ?? -1) > from)
        .map((target) => `${file} -> ${target}`);
    });
    expect(upward).toEqual([]);
  });

  it('keeps the client on the catalog alone, and config beside the floors', () => {
    const outside = (folder: string, allowed: readonly string[]) =>
      FILES.filter((file) => file.startsWith(folder)).flatMap((file) =>
        importsOf(file)
          .filter(
            (target) => !target.startsWith(folder) && !allowed.some((prefix) => target.startsWith(prefix)),
          )
          .map((target) => `${file} -> ${target}`),
      );
    expect(outside('src/client/', ['src/core/events/', 'src/core/backoff.ts', 'src/core/errors.ts'])).toEqual(
      [],
    );
    expect(outside('src/core/config/', ['src/core/errors.ts', 'src/core/deadline.ts'])).toEqual([]);
  });

  it('keeps SQL and the database drivers in the store adapters (src/core/store/)', () => {
    // A statement keyword at the start of a string, a prepared statement or a pragma, or a driver
    // loaded for its values (a type import names a parameter, it opens nothing).
    const sql = /['"`]\s*(SELECT|INSERT|UPDATE|DELETE|BEGIN|COMMIT|CREATE|WITH)\s/;
    const statement = /\.(prepare|pragma)\(|\.exec\(\s*['"`]/;
    const driver = /^import\s+(?!type\b)[^;]*from\s+'(better-sqlite3|pg|pg-copy-streams)'/m;
    const outside = FILES.filter((file) => !file.startsWith('src/core/store/')).filter((file) => {
      const text = readFileSync(join(ROOT, file), 'utf8');
      return sql.test(text) || statement.test(text) || driver.test(text);
    });
    expect(outside).toEqual([]);
  });

  it('leaves the SQLite trace writer to the store: every other floor takes the StoreWriter interface', () => {
    // A PostgreSQL writer takes the same place (docs/plans/store-port.md step 2): nothing above the store
    // may depend on the SQLite class.
    const users = FILES.filter((file) => !file.startsWith('src/core/store/')).filter((file) =>
      importsOf(file).includes('src/core/store/trace-writer.ts'),
    );
    expect(users).toEqual([]);
  });

  it('has the stream floor read the store through its ports: no SQLite store, database or writer class', () => {
    const sqliteOnly = ['trace-store.ts', 'database.ts', 'trace-writer.ts'].map(
      (name) => `src/core/store/${name}`,
    );
    const users = FILES.filter((file) => file.startsWith('src/core/stream/')).filter((file) =>
      importsOf(file).some((path) => sqliteOnly.includes(path)),
    );
    expect(users).toEqual([]);
  });

  it('has the gateway take what it needs of the store as functions: no trace context, database or store class', () => {
    const sqliteOnly = ['trace-store.ts', 'database.ts', 'trace-writer.ts', 'trace-context.ts'].map(
      (name) => `src/core/store/${name}`,
    );
    const users = FILES.filter((file) => file.startsWith('src/core/gateway/')).filter((file) =>
      importsOf(file).some((path) => sqliteOnly.includes(path)),
    );
    expect(users).toEqual([]);
  });

  it('keeps every source file at 500 lines or fewer', () => {
    const long = FILES.map((file) => ({
      file,
      lines: readFileSync(join(ROOT, file), 'utf8').split('\n').length,
    }))
      .filter(({ lines }) => lines > 501)
      .map(({ file, lines }) => `${file}: ${lines}`);
    expect(long).toEqual([]);
  });
});

/** Whether `T` holds JSON values only: no function, so a writer of any store can render it. */
type JsonOnly<T> = T extends string | number | boolean | null
  ? true
  : T extends (...args: never[]) => unknown
    ? false
    : T extends readonly (infer E)[]
      ? JsonOnly<E>
      : T extends object
        ? false extends { [K in keyof T]-?: JsonOnly<T[K]> }[keyof T]
          ? false
          : true
        : false;

type FunctionKeys<T> = {
  [K in keyof T]-?: NonNullable<T[K]> extends (...args: never[]) => unknown ? K : never;
}[keyof T];

describe('architecture: a queued row write is data (store-port plan step 1)', () => {
  // Checked by the type checker (`tsc`, which covers test/): at run time these assertions are no-ops.
  it('carries a RowChange of JSON values, and no function but the producer’s settled callback', () => {
    expectTypeOf<JsonOnly<RowChange>>().toEqualTypeOf<true>();
    expectTypeOf<FunctionKeys<RowWrite>>().toEqualTypeOf<'settled'>();
  });
});
