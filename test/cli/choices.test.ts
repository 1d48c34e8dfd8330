import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/run-cli.js';
import { tempDir } from '../helpers/tmp.js';

/** Options with a closed set of values are commander choices: checked before anything runs, listed in --help. */
describe('choice options (issue 17 obs. 7)', () => {
  it.each([
    [['tail', 'sess_x', '--preset', 'nope'], 'chat, full'],
    [['export', '--format', 'xml'], 'jsonl, csv'],
    [['export', '--max-sensitivity', 'secret'], 'private, user_controlled, pseudonymous, aggregatable'],
    [['serve', '--conformance', '--fault', 'nope'], 'drop-at-seam'],
    [['conformance', 'run', '--fault', 'nope'], 'snapshot-live-state'],
  ])(
    'metis %j is refused with exit 2, naming the allowed values',
    async (args, allowed) => {
      const result = await runCli(args, tempDir());
      expect(result.exitCode).toBe(2);
      expect(result.stderr).toMatch(/argument '(nope|xml|secret)' is invalid\. Allowed choices are /);
      expect(result.stderr).toContain(allowed);
    },
    30_000,
  );

  it('--help lists the choices', async () => {
    const result = await runCli(['tail', '--help'], tempDir());
    expect(result.stdout).toMatch(/--preset <name>\s+chat \(default\) or full \(choices: "chat", "full"\)/);
  }, 30_000);
});
