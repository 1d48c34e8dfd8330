import { useEffect, useState } from 'preact/hooks';
import {
  ApiError,
  api,
  type BudgetAnswer,
  type Multitask,
  type PendingConfirmation,
  type QueuedMessage,
} from '../api.js';
import { usePolled } from '../hooks.js';
import { useLiveSession } from '../live-session.js';
import type { Report } from '../report.js';
import { hrefOf, type Place } from '../router.js';
import { Approvals } from './approvals.js';
import { Budget } from './budget.js';
import { Conversation } from './conversation.js';
import { ModelPicker } from './model-picker.js';
import { NoSuchSession } from './no-such-session.js';
import { useStoredConversation } from './stored-conversation.js';
import { TurnQueue, WHILE_A_TURN_RUNS } from './turn-queue.js';

/**
 * One session, live: the conversation as it streams, approvals, cancel, a message box and the model
 * picker. A reload starts from the server's snapshot, so nothing is shown twice and nothing is missed.
 * While a turn runs the box stays open: the message is queued, steers the turn or interrupts it
 * (multitask), and what waits is listed with Drop. Neither the queue nor a budget's pause is an event
 * (the catalog is closed), so both are read from their routes while a turn runs and when turns change.
 */
export function SessionView({
  place,
  report,
}: {
  place: Extract<Place, { view: 'session' }>;
  report: Report;
}) {
  const { sessionId } = place;
  const live = useLiveSession(sessionId);
  const [pending, setPending] = useState<PendingConfirmation[]>([]);
  const [problem, setProblem] = useState<string | null>(null);
  const [draft, setDraft] = useState('');
  const [sending, setSending] = useState(false);
  const [multitask, setMultitask] = useState<Exclude<Multitask, 'reject'>>('enqueue');

  useEffect(() => {
    let stopped = false;
    api<{ confirmations: PendingConfirmation[] }>(
      'GET',
      `/sessions/${encodeURIComponent(sessionId)}/confirmations`,
    )
      .then((answer) => !stopped && setPending(answer.confirmations))
      .catch(report);
    return () => {
      stopped = true;
    };
  }, [sessionId, live.confirmationsSeen, report]);

  // The user's text and a tool's output are not on the stream (a turn's start and a tool's end are):
  // read them from the stored conversation whenever a turn starts or a tool ends.
  const toolsEnded = Object.values(live.state.tools).filter(
    (tool) => tool.status === 'completed' || tool.status === 'failed',
  ).length;
  const turnsSeen = Object.keys(live.state.turns).length;
  const stored = useStoredConversation(sessionId, `${turnsSeen}:${toolsEnded}`, report);

  useEffect(() => {
    if (place.focus === null) return;
    document.getElementById(`turn-${place.focus}`)?.scrollIntoView({ block: 'center' });
  }, [place.focus, live.state.messages.length > 0]);

  const inFlight = Object.values(live.state.turns).find(
    (turn) => turn.status === 'in_flight' && turn.session_id === sessionId,
  );
  const base = `/sessions/${encodeURIComponent(sessionId)}`;
  const everyMs = inFlight ? 1000 : 0;
  const queue = usePolled<{ queue: QueuedMessage[] }>(`${base}/queue`, everyMs, report);
  const budget = usePolled<BudgetAnswer>(`${base}/budget`, everyMs, report);
  // A turn starting or ending changes both.
  useEffect(() => {
    queue.refresh();
    budget.refresh();
  }, [turnsSeen, inFlight?.turn_id]);

  if (live.failure !== null && (live.failure.status === 404 || live.failure.code === 'session_not_found'))
    return <NoSuchSession sessionId={sessionId} />;
  if (live.failure !== null && live.failure.status === 401)
    report(new ApiError(401, 'unauthorized', live.failure.message));

  const session = live.state.session as { status?: string; active_model?: string | null } | null;
  const act = async (what: string, call: () => Promise<unknown>) => {
    setProblem(null);
    try {
      await call();
    } catch (error) {
      report(error);
      setProblem(`${what}: ${(error as Error).message}`);
    }
  };
  const send = async (event: Event) => {
    event.preventDefault();
    const message = draft.trim();
    if (message === '' || sending) return;
    setSending(true);
    await act('could not send', async () => {
      // A turn this page does not show yet (its stream lags the answer that started it) may run: the
      // message then waits behind it rather than being refused (409). With none running it starts one.
      await api('POST', `${base}/turns`, { message, multitask: inFlight ? multitask : 'enqueue' });
      // What was typed while the request was out stays.
      setDraft((typed) => (typed.trim() === message ? '' : typed));
    });
    queue.refresh();
    setSending(false);
  };
  return (
    <section class="session" aria-labelledby="session-title">
      <div class="toolbar">
        <h1 id="session-title">{sessionId}</h1>
        <span class={`pill ${session?.status ?? ''}`}>{session?.status ?? '…'}</span>
        <ModelPicker sessionId={sessionId} active={session?.active_model ?? null} report={report} />
        <a href={hrefOf({ view: 'trace', sessionId, eventId: null })}>Trace</a>
      </div>
      <p class={`link ${live.link}`} role="status" data-testid="link">
        {live.link === 'connected' ? 'live' : live.link === 'reconnecting' ? 'reconnecting…' : live.link}
        {live.note && live.link === 'connected' && <> · {live.note}</>}
        {live.link === 'stopped' && live.failure && <> · {live.failure.message}</>}
      </p>
      <Conversation state={live.state} figures={live.figures} focus={place.focus} stored={stored} />
      <Approvals
        pending={pending}
        decide={(confirmation, decision, scope) =>
          act('could not decide', async () => {
            await api(
              'POST',
              `/sessions/${encodeURIComponent(sessionId)}/confirmations/${encodeURIComponent(confirmation.confirmation_request_id)}`,
              { decision, scope, input_hash: confirmation.input_hash },
            );
            setPending((list) =>
              list.filter((c) => c.confirmation_request_id !== confirmation.confirmation_request_id),
            );
          })
        }
      />
      <Budget
        budget={budget.data}
        raise={(change) =>
          act('could not raise the budget', async () => {
            await api('POST', `${base}/budget`, { scope: change.scope, [change.measure]: change.cap });
            budget.refresh();
          })
        }
      />
      {/* Pinned to the window's bottom: the conversation growing above and the waiting list opening
          never move the box and its Send button from under the user's pointer. */}
      <div class="dock">
        <TurnQueue
          queue={queue.data?.queue ?? []}
          drop={(queued) =>
            act('could not drop', async () => {
              await api('DELETE', `${base}/queue/${encodeURIComponent(queued.queued_id)}`);
              queue.refresh();
            })
          }
        />
        {problem && (
          <p class="banner error" role="alert">
            {problem}
          </p>
        )}
        <form class="composer" onSubmit={send}>
          <label for="message">Message</label>
          <textarea
            id="message"
            rows={3}
            value={draft}
            disabled={session?.status === 'ended'}
            placeholder={
              session?.status === 'ended' ? 'This session has ended.' : 'Ask something… (Ctrl+Enter sends)'
            }
            onInput={(event) => setDraft(event.currentTarget.value)}
            onKeyDown={(event) => {
              if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) void send(event);
            }}
          />
          <div class="actions">
            {inFlight && (
              <label class="multitask">
                While this turn runs
                <select
                  data-testid="multitask"
                  value={multitask}
                  onChange={(event) =>
                    setMultitask(event.currentTarget.value as Exclude<Multitask, 'reject'>)
                  }
                >
                  {WHILE_A_TURN_RUNS.map((choice) => (
                    <option key={choice.value} value={choice.value}>
                      {choice.label}
                    </option>
                  ))}
                </select>
              </label>
            )}
            {inFlight && (
              <button
                type="button"
                class="danger"
                data-testid="cancel"
                onClick={() =>
                  act('could not cancel', () =>
                    api(
                      'POST',
                      `/sessions/${encodeURIComponent(sessionId)}/turns/${encodeURIComponent(inFlight.turn_id)}/cancel`,
                      {
                        reason: 'user_cancel',
                      },
                    ),
                  )
                }
              >
                Cancel turn
              </button>
            )}
            <button type="submit" class="primary" disabled={sending || draft.trim() === ''}>
              Send
            </button>
          </div>
        </form>
      </div>
    </section>
  );
}
