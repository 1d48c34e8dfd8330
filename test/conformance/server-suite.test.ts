import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type CheckResult, runConformance } from '../../src/client/conformance/runner.js';
import { startService } from '../../src/core/app/start-service.js';
import { MetisConfigSchema } from '../../src/core/config/schema.js';
import { silentLogger } from '../../src/core/logger.js';
import type { FaultName } from '../../src/core/stream/faults.js';
import { embeddedConformanceServer } from '../helpers/conformance-server.js';
import { tempDir } from '../helpers/tmp.js';

const embedded = embeddedConformanceServer;

const statusOf = (results: CheckResult[]) =>
  Object.fromEntries(results.map((r) => [r.name, r.outcome.status]));

describe('metis conformance run', () => {
  it('every check passes against metis serve --conformance', async () => {
    const results = await runConformance(await embedded());
    const failed = results.filter((r) => r.outcome.status !== 'pass');
    expect(failed).toEqual([]);
    expect(results.length).toBeGreaterThanOrEqual(20);
  }, 120_000);

  it('checks that need hooks are skipped with the reason against a server without them', async () => {
    const { startTestServer } = await import('../helpers/server.js');
    const server = await startTestServer();
    const results = await runConformance({ url: server.url, only: ['heartbeat', 'cursor_expired'] });
    const heartbeat = results.find((r) => r.name === 'heartbeat')!;
    expect(heartbeat.outcome).toEqual({ status: 'skip', reason: expect.stringContaining('--conformance') });
    expect(statusOf(results).cursor_expired).toBe('pass');
  }, 60_000);

  it('the tool cancellations pass against a plain `metis serve`, whose default policy asks before shell', async () => {
    const config = MetisConfigSchema.parse({ server: { port: 0 } });
    expect(config.runtime.tool_confirmation.execute).toBe('ask');
    const dir = tempDir();
    const service = await startService(config, join(dir, 'plain.db'), silentLogger(), {
      tokenFile: join(dir, 'token'),
    });
    onTestFinished(() => service.stop());
    const results = await runConformance({
      url: service.url,
      token: service.auth.token ?? undefined,
      only: ['cancel_mid_tool', 'cancel_at_seam'],
    });
    const cancels = results.filter((r) => r.name.startsWith('cancel_'));
    expect(results.filter((r) => r.outcome.status === 'fail')).toEqual([]);
    expect(cancels.map((r) => [r.name, r.outcome])).toEqual([
      ['cancel_mid_tool', expect.objectContaining({ status: 'pass' })],
      ['cancel_at_seam', expect.objectContaining({ status: 'pass' })],
    ]);
  }, 60_000);

  // Each fault breaks one guarantee: the matching checks must fail and an unrelated one must pass.
  const faults: [FaultName, string[], string[], string][] = [
    [
      'duplicate-replay',
      ['reconnect_replay', 'cancel_mid_llm'],
      ['reconnect_replay', 'invariant_id_order'],
      'cancel_mid_llm',
    ],
    ['drop-at-seam', ['snapshot_replay_seam', 'cursor_expired'], ['snapshot_replay_seam'], 'cursor_expired'],
    ['ignore-pings', ['heartbeat', 'invalid_filter'], ['heartbeat'], 'invalid_filter'],
    ['reorder-cancel', ['cancel_mid_tool', 'happy_path_order'], ['cancel_mid_tool'], 'happy_path_order'],
    [
      'cancel-ended-not-found',
      ['cancel_after_end', 'cancel_mid_llm'],
      ['cancel_after_end'],
      'cancel_mid_llm',
    ],
    [
      'silent-cancel-reason',
      ['cancel_reason_refused', 'cancel_mid_llm'],
      ['cancel_reason_refused'],
      'cancel_mid_llm',
    ],
    [
      'stop-reason-error',
      ['failed_call_stop_reason', 'cancel_mid_llm'],
      ['failed_call_stop_reason'],
      'cancel_mid_llm',
    ],
    [
      'strict-client-frames',
      ['client_frames_forward_compat', 'cursor_expired'],
      ['client_frames_forward_compat'],
      'cursor_expired',
    ],
    [
      'early-socket-queue',
      ['early_socket_burst', 'cursor_expired'],
      ['early_socket_burst'],
      'cursor_expired',
    ],
    ['json-only-liveness', ['protocol_pong_liveness', 'heartbeat'], ['protocol_pong_liveness'], 'heartbeat'],
    [
      'snapshot-live-state',
      ['snapshot_as_of_its_id', 'cursor_expired'],
      ['snapshot_as_of_its_id'],
      'cursor_expired',
    ],
    [
      'snapshot-hides-partial',
      ['snapshot_mid_answer', 'cursor_expired'],
      ['snapshot_mid_answer'],
      'cursor_expired',
    ],
    [
      'snapshot-hides-confirmation',
      ['snapshot_pending_confirmation', 'cursor_expired'],
      ['snapshot_pending_confirmation'],
      'cursor_expired',
    ],
    [
      'short-stream-window',
      ['resume_window', 'snapshot_mid_answer'],
      ['resume_window'],
      'snapshot_mid_answer',
    ],
  ];
  for (const [fault, only, mustFail, mustPass] of faults) {
    it(`the suite catches the ${fault} fault`, async () => {
      const status = statusOf(await runConformance({ ...(await embedded([fault])), only }));
      for (const name of mustFail) expect({ name, status: status[name] }).toEqual({ name, status: 'fail' });
      expect(status[mustPass]).toBe('pass');
    }, 60_000);
  }
});
