import { describe, expect, it } from 'vitest';
import { type CheckResult, runConformance } from '../../src/client/conformance/runner.js';
import { embeddedConformanceServer } from '../helpers/conformance-server.js';

/** Issue 15 point 8: `metis conformance run --transport sse`, every check that applies to SSE. */

const embedded = embeddedConformanceServer;

const byStatus = (results: CheckResult[], status: string) =>
  results.filter((r) => r.outcome.status === status).map((r) => r.name);

describe('metis conformance run --transport sse', () => {
  it('every check that applies to SSE passes; the WebSocket-only ones are skipped with the reason', async () => {
    const results = await runConformance({ ...(await embedded()), transport: 'sse' });
    expect(byStatus(results, 'fail')).toEqual([]);
    expect(byStatus(results, 'pass').length).toBeGreaterThanOrEqual(20);
    expect(byStatus(results, 'skip').sort()).toEqual(
      [
        'invalid_filter',
        'forward_compatibility',
        'cancel_after_end',
        'cancel_reason_refused',
        'heartbeat',
        'client_frames_forward_compat',
        'early_socket_burst',
        'protocol_pong_liveness',
      ].sort(),
    );
    const skipped = results.find((r) => r.name === 'heartbeat')!;
    expect(skipped.outcome).toEqual({ status: 'skip', reason: expect.stringContaining('WebSocket only') });
  }, 180_000);

  it('a broken seam and reordered cancellations fail their checks over SSE too', async () => {
    const seam = await runConformance({
      ...(await embedded(['drop-at-seam'])),
      transport: 'sse',
      only: ['snapshot_replay_seam', 'reconnect_replay'],
    });
    expect(byStatus(seam, 'fail')).toEqual(
      expect.arrayContaining(['snapshot_replay_seam', 'reconnect_replay']),
    );
    const cancel = await runConformance({
      ...(await embedded(['reorder-cancel'])),
      transport: 'sse',
      only: ['cancel_mid_llm'],
    });
    expect(byStatus(cancel, 'fail')).toContain('cancel_mid_llm');
  }, 120_000);
});
