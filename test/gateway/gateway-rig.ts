import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type MetisServer, startServer } from '../../src/core/app/metis-server.js';
import { type GatewayConfigInput, GatewayConfigSchema } from '../../src/core/config/gateway-schema.js';
import type { RuntimeConfigInput } from '../../src/core/config/runtime-schema.js';
import type { MetisEvent } from '../../src/core/events/envelope.js';
import { type IssueOptions, issueKey } from '../../src/core/gateway/key-admin.js';
import type { AuthThrottleOptions } from '../../src/core/http/auth-throttle.js';
import { createRuntime, type Runtime } from '../../src/core/runtime/runtime.js';
import type { TraceContext } from '../../src/core/store/trace-context.js';
import { openTraceContext } from '../../src/core/store/trace-context.js';
import { testRuntimeConfig } from '../helpers/runtime-config.js';

export interface GatewayRig {
  readonly runtime: Runtime;
  readonly context: TraceContext;
  readonly server: MetisServer;
  /** `http://127.0.0.1:<port>`. */
  readonly url: string;
  readonly keystore: string;
  readonly workspace: string;
  /** The folder of the database and the keystore. */
  readonly home: string;
  /** Issues a key straight into the keystore (as `metis gateway issue-key` does) and returns its secret. */
  issue(options?: Partial<IssueOptions>): { id: string; secret: string };
  /** Every stored event, once what was emitted so far is committed. */
  stored(): Promise<MetisEvent[]>;
  /** The stored events of one type. */
  storedOf(type: string): Promise<MetisEvent[]>;
  /** Stops the server and removes its folders (the file's `afterAll`); `keepHome` for a restart. */
  close(keepHome?: boolean): Promise<void>;
}

/**
 * A real server on port 0 with the gateway on, over a real SQLite file, its keystore in a temp folder;
 * shared by the tests of a file (made in `beforeAll`, closed in `afterAll`).
 */
export async function startGatewayRig(
  options: {
    runtime?: RuntimeConfigInput;
    gateway?: GatewayConfigInput;
    bearerToken?: string | null;
    authThrottle?: Partial<AuthThrottleOptions>;
    /** A folder of an earlier rig (its database and keystore): a restart. Kept at close. */
    home?: string;
  } = {},
): Promise<GatewayRig> {
  const home = options.home ?? mkdtempSync(join(tmpdir(), 'metis-gw-'));
  const keystore = join(home, 'gateway-keys.json');
  const context = openTraceContext({ validation: 'strict', dbPath: join(home, 'metis.db'), create: true });
  const workspace = mkdtempSync(join(tmpdir(), 'metis-gw-ws-'));
  const runtime = createRuntime({
    bus: context.bus,
    store: context.port,
    config: testRuntimeConfig(options.runtime),
  });
  const server = await startServer(runtime, context, {
    port: 0,
    bearerToken: options.bearerToken ?? null,
    gateway: {
      config: GatewayConfigSchema.parse(options.gateway ?? {}),
      keystorePath: keystore,
      authThrottle: options.authThrottle,
    },
  });
  const stored = async () => {
    await context.flush();
    return [...context.store.eventsAfter(null), ...context.store.sessionEvents('system')];
  };
  return {
    runtime,
    context,
    server,
    url: server.url,
    keystore,
    workspace,
    home,
    issue: (issue = {}) => {
      const { value } = issueKey(keystore, {
        name: 'test app',
        workspacePath: workspace,
        models: null,
        dailyUsd: null,
        monthlyUsd: null,
        userId: null,
        teamId: null,
        ...issue,
      });
      return { id: value.key.id, secret: value.secret };
    },
    stored,
    storedOf: async (type) => (await stored()).filter((event) => event.type === type),
    close: async (keepHome = false) => {
      await server.close();
      await runtime.close();
      await context.close();
      if (options.home === undefined && !keepHome) rmSync(home, { recursive: true, force: true });
      rmSync(workspace, { recursive: true, force: true });
    },
  };
}
