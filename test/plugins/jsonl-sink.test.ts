import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { RotatingFile } from '../../src/plugins/jsonl-sink.js';
import { turnStarted } from '../helpers/events.js';
import { tempDir, tempTraceContext } from '../helpers/tmp.js';
import { pluginProject, startProjectPlugins } from './plugin-harness.js';

const read = (path: string) => readFileSync(path, 'utf8').trim().split('\n').filter(Boolean);

describe('jsonl-sink', () => {
  it('appends matching events as JSONL, path relative to the config file, on the batch path', async () => {
    const { dir, configPath } = pluginProject([], {
      plugins: [['jsonl-sink', { path: 'out/events.jsonl', event_types: ['turn.started'] }]],
    });
    const context = tempTraceContext();
    const host = await startProjectPlugins(configPath, context);
    const emitted = [1, 2, 3].map((n) => context.bus.emit(turnStarted('sess_a', null, `turn_${n}`))!);
    await context.flush();

    const file = join(dir, 'out/events.jsonl');
    const events = read(file).map((line) => JSON.parse(line));
    expect(events).toEqual(emitted.map((e) => JSON.parse(JSON.stringify(e))));
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(host.list()[0]).toMatchObject({ fast_path: false, delivered: 3, stats: { written: 3 } });
  });

  it('rotates by size: file, file.1 … file.<max_files>, every file whole lines under max_bytes', async () => {
    const { dir, configPath } = pluginProject([], {
      plugins: [
        [
          'jsonl-sink',
          { path: 'events.jsonl', max_bytes: 2000, max_files: 2, event_types: ['turn.started'] },
        ],
      ],
    });
    const context = tempTraceContext();
    await startProjectPlugins(configPath, context);
    const ids: string[] = [];
    // ~390 bytes a line: five lines a file; 23 events fill the live file and both rotated ones, and
    // the oldest lines fall off the end.
    for (let batch = 0; batch < 23; batch += 1) {
      ids.push(context.bus.emit(turnStarted('sess_a', null, `turn_${batch}`))!.id);
      if (batch % 4 === 0) await context.flush();
    }
    await context.flush();

    const base = join(dir, 'events.jsonl');
    const files = [`${base}.2`, `${base}.1`, base];
    expect(existsSync(`${base}.3`)).toBe(false);
    const kept = files.flatMap((f) => read(f).map((line) => JSON.parse(line).id as string));
    for (const f of files) expect(statSync(f).size).toBeLessThanOrEqual(2000);
    // Newest events are kept in order across the files; only the oldest were deleted.
    expect(kept).toEqual(ids.slice(ids.length - kept.length));
    expect(kept.length).toBeGreaterThan(10);
    expect(read(base).length).toBeGreaterThan(0);
  });

  it('splits one batch across rotations at line boundaries', async () => {
    const path = join(tempDir(), 'x.jsonl');
    const file = new RotatingFile(path, 25, 3);
    await file.append(['aaaaaaaaa\n', 'bbbbbbbbb\n', 'ccccccccc\n', 'ddddddddd\n', 'eeeeeeeee\n']);
    expect(readFileSync(`${path}.2`, 'utf8')).toBe('aaaaaaaaa\nbbbbbbbbb\n');
    expect(readFileSync(`${path}.1`, 'utf8')).toBe('ccccccccc\nddddddddd\n');
    expect(readFileSync(path, 'utf8')).toBe('eeeeeeeee\n');
    // A line longer than the limit gets a file of its own.
    await file.append([`${'z'.repeat(40)}\n`]);
    expect(readFileSync(path, 'utf8')).toBe(`${'z'.repeat(40)}\n`);
    expect(readFileSync(`${path}.1`, 'utf8')).toBe('eeeeeeeee\n');
    expect(readFileSync(`${path}.3`, 'utf8')).toBe('aaaaaaaaa\nbbbbbbbbb\n');
  });
});
