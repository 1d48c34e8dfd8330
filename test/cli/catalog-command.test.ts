import { describe, expect, it } from 'vitest';
import { CATALOG_ENTRIES } from '../../src/core/events/catalog/index.js';
import { STREAMING_ENTRIES } from '../../src/core/events/streaming.js';
import { runCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

describe('metis catalog (child process)', () => {
  it('--json lists every catalog and streaming type with its fields', async () => {
    const result = await runCli(['catalog', '--json'], tempDir());
    expect(result.exitCode).toBe(0);
    const { types } = JSON.parse(result.stdout) as {
      types: { type: string; family: string; fields: { name: string }[] }[];
    };
    expect(types.map((t) => t.type).sort()).toEqual(
      [...CATALOG_ENTRIES.map((e) => e.type), ...STREAMING_ENTRIES.map((e) => e.type)].sort(),
    );
    const failed = types.find((t) => t.type === 'tool.failed')!;
    expect(failed.family).toBe('catalog');
    expect(failed.fields.map((f) => f.name)).toEqual([
      'tool_use_id',
      'error_class',
      'error_message',
      'latency_ms',
    ]);
    expect(types.find((t) => t.type === 'text.delta')!.family).toBe('streaming');
  });

  it('--type shows one payload; an unknown type or domain fails naming it', async () => {
    const home = tempDir();
    const one = await runCli(['catalog', '--type', 'turn.started'], home);
    expect(one.exitCode).toBe(0);
    expect(one.stdout).toContain('user_message_text_redacted');
    const unknown = await runCli(['catalog', '--type', 'turn.paused'], home);
    expect(unknown.exitCode).not.toBe(0);
    expect(unknown.stderr).toContain('error: --type: unknown event type "turn.paused"');
    const domain = await runCli(['catalog', '--domain', 'nope'], home);
    expect(domain.exitCode).toBe(2);
    expect(domain.stderr).toContain('--domain');
    // A known type outside the --domain given is not "unknown".
    const elsewhere = await runCli(['catalog', '--domain', 'tool', '--type', 'turn.started'], home);
    expect(elsewhere.exitCode).toBe(2);
    expect(elsewhere.stderr).toContain('--type: "turn.started" is in domain turn, not tool');
  });

  it('--version and --help work; an unknown command fails', async () => {
    const home = tempDir();
    expect((await runCli(['--version'], home)).stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
    const help = await runCli(['--help'], home);
    for (const command of ['catalog', 'serve', 'trace', 'backup', 'restore', 'export'])
      expect(help.stdout).toContain(command);
    expect((await runCli(['frobnicate'], home)).exitCode).not.toBe(0);
  });
});
