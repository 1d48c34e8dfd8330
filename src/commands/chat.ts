import { intro, isCancel, log, outro, text, updateSettings } from '@clack/prompts';
import type { ClientItem } from '../client/client.js';
import { followTurn } from '../client/follow-turn.js';
import { liveTextWriter } from '../client/live-text.js';
import { type ConversationState, initialState } from '../client/reducer.js';
import { visibleText } from '../client/visible-text.js';
import { MetisError } from '../core/errors.js';
import { apiRequest, type ServerTarget } from './api-request.js';
import { moreQueued, STEER_PREFIX, TypeAhead, turnCount } from './chat-queue.js';
import { answeringInPlace } from './in-place-approvals.js';
import { serverTarget, type TargetOptions } from './server-target.js';
import { failureError } from './tail.js';

export interface ChatOptions extends TargetOptions {
  /** Pin this model for the session (`PUT /sessions/{id}/model`). */
  model?: string;
}

const HELP = [
  '/model          show the session model and the models the server can serve',
  '/model <model>  pin a model for the session (provider:name)',
  '/cancel         cancel the turn in flight (one started elsewhere)',
  '/help           this list',
  `During a turn, type a line to queue it after the turn; start it with ${STEER_PREFIX} to add it to the running turn.`,
  '/exit           leave (so do Ctrl-D and Esc at the prompt)',
  'During a turn: Ctrl-C cancels it; Ctrl-C again leaves.',
].join('\n');

/** How many messages of a resumed session are shown before the first prompt. */
const HISTORY_MESSAGES = 20;

/**
 * `metis chat [session]`: a conversation in the terminal. A prompt per message, each turn streamed as
 * `send --follow` renders it, tool approvals answered in place, Ctrl-C to cancel a turn.
 */
export async function chatCommand(session: string | undefined, options: ChatOptions): Promise<void> {
  if (!process.stdin.isTTY || !process.stdout.isTTY) {
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      'metis chat needs a terminal on stdin and stdout; in a script use: metis send <session> "message" --follow',
    );
  }
  // Ctrl-D at the prompt leaves, as in a shell.
  updateSettings({ aliases: { '\u0004': 'cancel' } });
  const target = await serverTarget(options);
  const sessionId = session ?? ((await apiRequest(target, 'POST', '/sessions', {})).session_id as string);
  intro(`metis chat · ${visibleText(sessionId)}${session === undefined ? ' (new)' : ''}`);
  if (session !== undefined) await printHistory(target, sessionId);
  if (options.model !== undefined) await pinModel(target, sessionId, options.model);
  for (;;) {
    const message = await text({ message: 'you', placeholder: '/help for commands' });
    if (isCancel(message)) break;
    const line = message.trim();
    if (line === '') continue;
    if (line.startsWith('/')) {
      if (await runCommand(target, sessionId, line)) break;
      continue;
    }
    // Lines typed during a turn are queued on the server: follow each turn they start, in order.
    let shown = await turnCount(target, sessionId);
    let since = await runTurn(target, sessionId, line, null);
    for (;;) {
      shown += 1;
      if (since === null || !(await moreQueued(target, sessionId, shown).catch(() => false))) break;
      since = await runTurn(target, sessionId, null, since);
    }
  }
  outro(`bye · resume with: metis chat ${visibleText(sessionId)}`);
}

/** A slash command; true when it ends the chat. */
async function runCommand(target: ServerTarget, sessionId: string, line: string): Promise<boolean> {
  const [name, ...args] = line.split(/\s+/);
  switch (name) {
    case '/exit':
    case '/quit':
      return true;
    case '/help':
      log.info(HELP);
      return false;
    case '/model': {
      if (args[0] === undefined) log.info(await modelsText(target, sessionId));
      else await pinModel(target, sessionId, args[0]);
      return false;
    }
    case '/cancel': {
      const { session } = await apiRequest(target, 'GET', `/sessions/${encodeURIComponent(sessionId)}`);
      const turnId = session.current_turn_id as string | null;
      if (turnId === null) log.info('no turn in flight');
      else {
        await cancelTurn(target, sessionId, turnId);
        log.info(`cancelling turn ${visibleText(turnId)}`);
      }
      return false;
    }
    default:
      log.warn(`unknown command ${visibleText(name ?? '')}; /help lists them`);
      return false;
  }
}

/** `/model`: the session's model, then the models the server can serve now (`GET /models`). */
async function modelsText(target: ServerTarget, sessionId: string): Promise<string> {
  const { session } = await apiRequest(target, 'GET', `/sessions/${encodeURIComponent(sessionId)}`);
  const lines = [`model: ${visibleText(String(session.active_model))}`];
  try {
    const { default_model: fallback, models } = await apiRequest(target, 'GET', '/models');
    lines.push('the server can serve:');
    for (const model of models as string[])
      lines.push(`  ${visibleText(model)}${model === fallback ? '  (default)' : ''}`);
    lines.push('/model <model> pins one for this session');
  } catch (error) {
    if (!(error instanceof MetisError)) throw error;
    lines.push(`(no list of models: ${visibleText(error.message)})`);
  }
  return lines.join('\n');
}

async function pinModel(target: ServerTarget, sessionId: string, model: string): Promise<void> {
  try {
    await apiRequest(target, 'PUT', `/sessions/${encodeURIComponent(sessionId)}/model`, { model });
    log.success(`model: ${visibleText(model)} (pinned for this session)`);
  } catch (error) {
    if (!(error instanceof MetisError)) throw error;
    log.error(visibleText(error.message));
  }
}

function cancelTurn(target: ServerTarget, sessionId: string, turnId: string) {
  return apiRequest(target, 'POST', `/sessions/${encodeURIComponent(sessionId)}/turns/${turnId}/cancel`, {
    reason: 'user_cancel',
  });
}

/**
 * One turn, streamed. A question for the user (a tool waiting for approval) pauses the output and
 * asks in place; what arrives meanwhile is shown after the answer. Ctrl-C cancels the turn and shows
 * its end; a second Ctrl-C leaves metis chat (the cancel goes on on the server).
 */
async function runTurn(
  target: ServerTarget,
  sessionId: string,
  /** null: follow the next turn the server starts from the queue, after `since`. */
  message: string | null,
  since: string | null,
): Promise<string | null> {
  // Inside chat another model is picked with /model, not the command line's --model.
  const write = liveTextWriter(sessionId, { serverUrl: target.url, modelChoice: '/model' });
  const approvals = answeringInPlace(write, target, sessionId);
  const typeAhead = new TypeAhead(target, sessionId);
  let lastEventId: string | null = null;
  let turnId: string | null = null;
  let cancelling = false;
  const onInterrupt = () => {
    if (turnId === null || cancelling) {
      process.stdout.write(`\n${turnId === null ? '' : `turn ${turnId} is being cancelled; `}bye\n`);
      process.exit(130);
    }
    cancelling = true;
    process.stdout.write('\ncancelling (Ctrl-C again to leave)…\n');
    cancelTurn(target, sessionId, turnId).catch((error: unknown) => {
      process.stdout.write(`could not cancel: ${visibleText((error as Error).message)}\n`);
    });
  };
  process.on('SIGINT', onInterrupt);
  typeAhead.start();
  try {
    await followTurn({
      ...target,
      sessionId,
      message: message ?? '',
      next: message === null,
      since,
      onSubmitted: (id) => {
        turnId = id;
      },
      render: (item: ClientItem, state: ConversationState) => {
        // Each turn connects anew: "connected" would repeat before every answer; trouble still shows.
        if (item.kind === 'status' && item.status !== 'reconnecting') return;
        if (item.kind === 'frame' && item.frame.type === 'event') lastEventId = item.frame.event.id;
        approvals.render(item, state ?? initialState);
        if (
          item.kind === 'frame' &&
          item.frame.type === 'event' &&
          item.frame.event.type === 'tool.confirmation_requested'
        )
          typeAhead.pauseWhile(approvals.settled());
      },
    });
  } catch (error) {
    log.error(visibleText(failureMessage(error, target)));
    return null;
  } finally {
    process.off('SIGINT', onInterrupt);
    await typeAhead.stop();
    await approvals.settled();
  }
  return lastEventId;
}

function failureMessage(error: unknown, target: ServerTarget): string {
  const failure = (error as { failure?: Parameters<typeof failureError>[0] | null }).failure;
  if (failure) return failureError(failure, target.url, target.token).message;
  return (error as Error).message ?? String(error);
}

/** The last messages of a resumed session: what was said, and which tools ran. */
async function printHistory(target: ServerTarget, sessionId: string): Promise<void> {
  const { messages } = await apiRequest(
    target,
    'GET',
    `/sessions/${encodeURIComponent(sessionId)}/messages?limit=${HISTORY_MESSAGES}`,
  );
  for (const m of messages as { role: string; content: { type: string; text?: string; name?: string }[] }[]) {
    const said = m.content
      .filter((b) => b.type === 'text')
      .map((b) => b.text ?? '')
      .join('');
    const tools = m.content.filter((b) => b.type === 'tool_use').map((b) => b.name ?? 'tool');
    if (m.role === 'user' && said !== '') log.message(visibleText(said), { symbol: 'you' });
    if (m.role === 'assistant' && (said !== '' || tools.length > 0)) {
      const calls = tools.length > 0 ? `${said === '' ? '' : '\n'}[${tools.join(', ')}]` : '';
      log.message(`${visibleText(said)}${calls}`, { symbol: 'assistant' });
    }
  }
}
