import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { freePort } from './free-port.js';

/**
 * A real NATS server for the tests: Debian's `nats-server` (or `$METIS_NATS_BIN`) on a free port on
 * 127.0.0.1, core NATS only (no JetStream, so nothing is stored). Unlike PostgreSQL it runs fine as root.
 * METIS_REQUIRE_NATS=1 turns a missing server into a failure instead of a skip.
 */
export const NATS_BIN = process.env.METIS_NATS_BIN ?? findServer();
export const natsTestsRun = NATS_BIN !== null || process.env.METIS_REQUIRE_NATS === '1';
if (NATS_BIN === null)
  console.warn(
    'NATS tests skipped: no nats-server on PATH or in /usr/sbin, /usr/bin ' +
      "(install Debian's nats-server, or set METIS_NATS_BIN)",
  );

function findServer(): string | null {
  // Debian puts it in /usr/sbin, which a non-root PATH often lacks.
  const dirs = [...(process.env.PATH ?? '').split(delimiter).filter(Boolean), '/usr/sbin', '/usr/bin'];
  for (const dir of dirs) {
    const path = join(dir, 'nats-server');
    if (existsSync(path)) return path;
  }
  return null;
}

function acceptsTcp(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

export interface NatsServer {
  /** `nats://127.0.0.1:<port>`. */
  readonly url: string;
  readonly port: number;
  /** Stops the server (SIGINT, a clean shutdown); `start` brings it back on the same port. */
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops the server and removes its folder. */
  destroy(): Promise<void>;
}

/** Starts a server (with `args` added, e.g. `--user`/`--pass`); resolves once its port accepts TCP connections. */
export async function startNats(args: readonly string[] = []): Promise<NatsServer> {
  if (NATS_BIN === null) throw new Error('no nats-server binary (see test/helpers/nats.ts)');
  const bin = NATS_BIN;
  // Its log goes here, so a server that fails to start can say why.
  const dir = mkdtempSync(join(tmpdir(), 'metis-nats-'));
  const log = join(dir, 'nats-server.log');
  const port = await freePort();
  let child: ChildProcess | null = null;
  const logTail = () =>
    existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n').slice(-5).join('\n') : '';
  const start = async () => {
    if (child !== null && child.exitCode === null && child.signalCode === null) return; // already up
    const running = spawn(bin, ['-a', '127.0.0.1', '-p', String(port), '-l', log, ...args], {
      cwd: dir,
      stdio: 'ignore',
    });
    child = running;
    const spawnError: { error?: Error } = {};
    running.once('error', (error) => {
      spawnError.error = error; // unhandled, it would crash the test process
    });
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (spawnError.error !== undefined) throw spawnError.error;
      // An early exit (say, the port was taken meanwhile) fails now rather than at the deadline.
      if (running.exitCode !== null || running.signalCode !== null)
        throw new Error(`nats-server exited (${running.exitCode ?? running.signalCode}):\n${logTail()}`);
      if (await acceptsTcp(port)) return;
      if (Date.now() > deadline) throw new Error(`nats-server did not start on port ${port} within 30 s`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };
  const stop = async () => {
    const running = child;
    child = null;
    if (running === null || running.exitCode !== null || running.signalCode !== null) return;
    const exited = new Promise((resolve) => running.once('exit', resolve));
    running.kill('SIGINT'); // exits 0 after closing clients; SIGTERM does the same but exits 1
    await exited;
  };
  try {
    await start();
  } catch (error) {
    await stop();
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    stop,
    start,
    destroy: async () => {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
