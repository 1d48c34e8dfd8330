import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The files that take longest (seconds on CI's 2 cores, measured on a full run), started first. A fresh
 * clone has no cached durations, so vitest orders by file size, and a one-minute file picked last runs
 * alone while the other worker idles. Order here is longest first; a file not listed keeps vitest's order.
 */
const SLOW_FIRST = [
  'test/package/install-tarball.test.ts',
  'test/cluster/cluster-node.test.ts',
  'test/conformance/server-suite.test.ts',
  'test/cluster/three-nodes.test.ts',
  'test/durable/restart-property.test.ts',
  'test/durable/durable-turns.test.ts',
  'test/durable/restart-property-postgres.test.ts',
  'test/store/serve-on-postgres.test.ts',
  'test/store/store-copy.test.ts',
  'test/cluster/fault-accounting.test.ts',
  'test/bench-stream-smoke.test.ts',
  'test/cluster/node-kill.test.ts',
  'test/docs/readme-commands.test.ts',
  'test/browser/dashboard.test.ts',
  'test/bench-cluster-smoke.test.ts',
  'test/cli/session-commands.test.ts',
  'test/soak/server-soak.test.ts',
  'test/durable/durable-stop.test.ts',
  'test/durable/durable-clients.test.ts',
];

export default class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (spec: TestSpecification) => {
      const index = SLOW_FIRST.indexOf(relative(process.cwd(), spec.moduleId));
      return index === -1 ? SLOW_FIRST.length : index;
    };
    // Array.prototype.sort is stable: the files not listed keep the order vitest chose.
    return sorted.sort((a, b) => rank(a) - rank(b));
  }
}
