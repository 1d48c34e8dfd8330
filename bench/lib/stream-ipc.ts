/**
 * A tiny request/response channel between the stream benchmark and its child processes (the server
 * under test and the client load), over Node's IPC with the `advanced` serialization so typed arrays
 * of latencies travel as they are.
 */
import { type ChildProcess, spawn } from 'node:child_process';

interface Request {
  readonly id: number;
  readonly cmd: string;
  readonly args: unknown;
}

type Reply =
  | { readonly id: number; readonly ok: true; readonly result: unknown }
  | { readonly id: number; readonly ok: false; readonly error: string };

export interface WorkerOptions {
  /** Raise the child's soft open-file limit to at least this (through the shell's `ulimit -n`). */
  readonly fdLimit?: number;
  /** Extra node flags, e.g. `--cpu-prof`. */
  readonly nodeFlags?: readonly string[];
  /** What to call the child in error messages. */
  readonly label: string;
}

export interface Worker {
  readonly pid: number;
  readonly label: string;
  call<T>(cmd: string, args?: unknown, timeoutMs?: number): Promise<T>;
  /** Asks the child to clean up and exit; kills it if it has not within a few seconds. Idempotent. */
  stop(): Promise<void>;
}

/** Starts `node --expose-gc --import tsx <script> ...args` with an IPC channel; resolves once it is ready. */
export async function startWorker(
  script: string,
  args: readonly string[],
  options: WorkerOptions,
): Promise<Worker> {
  const nodeArgs = ['--expose-gc', ...(options.nodeFlags ?? []), '--import', 'tsx', script, ...args];
  const stdio: ('ignore' | 'inherit' | 'ipc')[] = ['ignore', 'inherit', 'inherit', 'ipc'];
  const child: ChildProcess =
    options.fdLimit === undefined
      ? spawn(process.execPath, nodeArgs, { stdio, serialization: 'advanced' })
      : spawn(
          '/bin/sh',
          [
            '-c',
            // Raise the soft limit when it is below what the figure needs (never above the hard limit).
            'want=$1; shift; [ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge "$want" ] || ulimit -n "$want" || exit 97; exec "$@"',
            'sh',
            String(options.fdLimit),
            process.execPath,
            ...nodeArgs,
          ],
          { stdio, serialization: 'advanced' },
        );
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  let nextId = 1;
  let exited = false;
  let exitInfo = '';
  const exitedPromise = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      exited = true;
      exitInfo = signal !== null ? `signal ${signal}` : `code ${code}`;
      for (const p of pending.values()) p.reject(new Error(`${options.label} exited (${exitInfo})`));
      pending.clear();
      resolve();
    });
  });

  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${options.label} did not start in 30 s`)), 30_000);
    const onExit = () => {
      clearTimeout(timer);
      reject(
        new Error(
          `${options.label} exited before it was ready` +
            (options.fdLimit !== undefined ? ` (could it raise ulimit -n to ${options.fdLimit}?)` : ''),
        ),
      );
    };
    child.once('exit', onExit);
    child.once('message', (message) => {
      clearTimeout(timer);
      child.off('exit', onExit);
      if ((message as { ready?: boolean }).ready === true) resolve();
      else reject(new Error(`${options.label}: unexpected first message`));
    });
  });

  child.on('message', (message) => {
    const reply = message as Reply;
    const waiter = pending.get(reply.id);
    if (waiter === undefined) return;
    pending.delete(reply.id);
    if (reply.ok) waiter.resolve(reply.result);
    else waiter.reject(new Error(`${options.label}: ${reply.error}`));
  });

  let stopping: Promise<void> | null = null;
  return {
    pid: child.pid!,
    label: options.label,
    call: <T>(cmd: string, callArgs?: unknown, timeoutMs = 120_000) => {
      if (exited) return Promise.reject(new Error(`${options.label} has exited (${exitInfo})`));
      const id = nextId++;
      return new Promise<T>((resolve, reject) => {
        const timer = setTimeout(() => {
          pending.delete(id);
          reject(new Error(`${options.label}: "${cmd}" timed out after ${timeoutMs} ms`));
        }, timeoutMs);
        pending.set(id, {
          resolve: (v) => {
            clearTimeout(timer);
            resolve(v as T);
          },
          reject: (e) => {
            clearTimeout(timer);
            reject(e);
          },
        });
        child.send({ id, cmd, args: callArgs ?? null } satisfies Request);
      });
    },
    stop: () => {
      stopping ??= (async () => {
        if (exited) return;
        const id = nextId++;
        try {
          child.send({ id, cmd: '__exit', args: null } satisfies Request);
        } catch {
          // the channel is gone: the kill below takes care of it
        }
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exitedPromise;
        clearTimeout(timer);
      })();
      return stopping;
    },
  };
}

export type Handlers = Record<string, (args: any) => unknown>;

/**
 * The child's side: answers requests with `handlers`, runs `cleanup` and exits on `__exit` or when
 * the parent goes away (so no child outlives a crashed benchmark).
 */
export function serveRpc(handlers: Handlers, cleanup: () => Promise<void> | void): void {
  let exiting = false;
  const exit = async () => {
    if (exiting) return;
    exiting = true;
    try {
      await cleanup();
    } finally {
      process.exit(0);
    }
  };
  process.on('message', async (message: Request) => {
    if (message.cmd === '__exit') {
      await exit();
      return;
    }
    const handler = handlers[message.cmd];
    let reply: Reply;
    try {
      if (handler === undefined) throw new Error(`unknown command "${message.cmd}"`);
      reply = { id: message.id, ok: true, result: await handler(message.args) };
    } catch (error) {
      reply = { id: message.id, ok: false, error: (error as Error).stack ?? String(error) };
    }
    if (process.connected) process.send!(reply);
  });
  process.on('disconnect', () => void exit());
  process.send!({ ready: true });
}
