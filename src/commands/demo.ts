import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { followTurn } from '../client/follow-turn.js';
import { liveTextWriter } from '../client/live-text.js';
import { visibleJson, visibleText } from '../client/visible-text.js';
import { startService } from '../core/app/start-service.js';
import { MetisConfigSchema } from '../core/config/schema.js';
import { silentLogger } from '../core/logger.js';
import { apiRequest } from './api-request.js';
import { type Invocation, invocation } from './invocation.js';

export interface DemoOptions {
  message?: string;
  keep?: boolean;
  /** The turn's frames as JSON lines (as `send --follow --json`), instead of the human view. */
  json?: boolean;
}

/**
 * Starts an embedded server on a temporary database, runs one scripted turn that thinks, calls a tool
 * and answers, renders it live exactly as `metis tail` would, then says what to try next.
 */
export async function demoCommand(options: DemoOptions): Promise<void> {
  const home = mkdtempSync(join(tmpdir(), 'metis-demo-'));
  const config = MetisConfigSchema.parse({ server: { port: 0 } });
  // The demo's own token file, in its temporary home: the user's $METIS_HOME is left alone.
  const service = await startService(config, join(home, 'metis.db'), silentLogger(), {
    tokenFile: join(home, 'token'),
  });
  const target = { url: service.url, token: service.auth.token ?? undefined };
  const cleanUp = async () => {
    await service.stop();
    if (!options.keep) rmSync(home, { recursive: true, force: true });
  };
  // Ctrl-C (a turn waiting for a confirmation, say) must not leave the temporary database behind.
  const onInterrupt = () => {
    void cleanUp().finally(() => process.exit(130));
  };
  process.once('SIGINT', onInterrupt);
  // A reader that went away (`metis demo | head -1`) ends the process at once (cli.ts): no litter either.
  const removeOnExit = () => {
    if (!options.keep) rmSync(home, { recursive: true, force: true });
  };
  process.once('exit', removeOnExit);
  try {
    if (!options.json) console.log(`metis demo: embedded server on ${service.url} (database in ${home})\n`);
    const { session_id: sessionId } = await apiRequest(target, 'POST', '/sessions', {});
    const message = options.message ?? 'think: time';
    if (!options.json) console.log(`you: ${visibleText(message)}`);
    const writeText = liveTextWriter(sessionId, { serverUrl: service.url });
    await followTurn({
      url: service.url,
      token: target.token,
      sessionId,
      message,
      render: (item, state) => {
        if (!options.json) writeText(item, state);
        else if (item.kind === 'frame') process.stdout.write(`${visibleJson(JSON.stringify(item.frame))}\n`);
      },
    });
    if (options.json) return;
    console.log(tryNext(invocation()));
  } finally {
    process.off('SIGINT', onInterrupt);
    process.off('exit', removeOnExit);
    await cleanUp();
  }
}

/** What to try next, as commands that run where the user is (`metis`, `npx metis` or `node …`). */
export function tryNext({ prefix, hint }: Invocation): string {
  const lines: [string, string][] = [
    ['serve', 'a server on 127.0.0.1:8421 with the scripted model'],
    ['send --new "think: time" --follow', 'a turn that thinks, calls a tool and answers'],
    ['tail <session> --preset full', 'follow a session live in a second terminal'],
    ['send <session> "slow: a long story"', `then: ${prefix} cancel <session>`],
    ['trace stats', 'what the trace store holds'],
  ];
  const commands = lines.map(([args, what]) => [`${prefix} ${args}`, what] as const);
  const width = Math.max(...commands.map(([command]) => command.length)) + 2;
  return [
    '',
    'Try next:',
    ...commands.map(([command, what]) => `  ${command.padEnd(width)} # ${what}`),
    ...(hint === null ? [] : [`(${hint})`]),
    'Scripted triggers: plain text, think:, time, run: <cmd>, read: <path>, delegate: <task>, slow:, fail: <class>.',
  ].join('\n');
}
