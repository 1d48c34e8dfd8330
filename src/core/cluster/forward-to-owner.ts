import { type Broker, NoResponderError } from './broker.js';
import {
  FORWARDED_HEADER,
  type ForwardedAnswer,
  type ForwardedRequest,
  type Forwarder,
  forwardRequest,
  type RunInProcess,
} from './request-forwarding.js';

/**
 * Forwards a request the gate refused to the node that owns its session, for as long as that node stays
 * alive by the heartbeats. An owner that stops answering (frozen, cut off) is seen silent within the
 * node timeout; the request is then run here, where the gate takes the session over (or refuses it,
 * naming the owner). Waiting out the reply timeout, 35 s, then answering 409 kept a client waiting on
 * a node that was gone (issue 35, cause 7).
 */
export async function forwardToOwner(parts: {
  readonly broker: Broker;
  readonly from: Forwarder;
  readonly owner: string;
  readonly request: ForwardedRequest;
  /** Whether a node is alive by the last heartbeat this node read. */
  readonly alive: (nodeId: string) => boolean;
  /** How often the owner's liveness is looked at (a heartbeat). */
  readonly checkEveryMs: number;
  readonly runInProcess: RunInProcess;
}): Promise<ForwardedAnswer> {
  const { request } = parts;
  const forwarded = deliver(parts);
  // Once the owner went silent its late failure is nobody's to handle.
  forwarded.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  const silence = new Promise<'silent'>((resolve) => {
    // Absent at two looks a beat apart: a node that just joined is in the peers by the next beat.
    let absent = 0;
    const look = () => {
      absent = parts.alive(parts.owner) ? 0 : absent + 1;
      if (absent >= 2) resolve('silent');
      else timer = setTimeout(look, parts.checkEveryMs);
    };
    timer = setTimeout(look, parts.checkEveryMs);
  });
  try {
    const first = await Promise.race([forwarded, silence]);
    if (first !== 'silent') return first;
  } finally {
    clearTimeout(timer);
  }
  // Marked forwarded: if the gate here still refuses, the refusal is the answer, not another forward.
  const answer = await parts.runInProcess({
    method: request.method,
    url: request.url,
    headers: { accept: 'application/json', 'content-type': 'application/json', [FORWARDED_HEADER]: '1' },
    body: request.body === null ? null : JSON.stringify(request.body),
  });
  return { ...answer, node: parts.from.nodeId };
}

/**
 * A request no one was subscribed to receive is sent again this often, this many times (a second in
 * all): long enough for an owner to subscribe again once its broker is back (milliseconds), short enough
 * that an owner that never answers is told apart from a slow one by the caller, not by this wait.
 */
const NO_RESPONDER_RETRY_MS = 100;
const NO_RESPONDER_TRIES = 10;

/**
 * Sends the request to the owner. Just after the broker came back the owner may not have subscribed
 * again yet: the broker says no one answers, the request went nowhere, and it is sent again shortly
 * (see NO_RESPONDER_TRIES) rather than failing a request whose owner is alive.
 */
async function deliver(parts: Parameters<typeof forwardToOwner>[0]): Promise<ForwardedAnswer> {
  for (let tries = 1; ; tries += 1) {
    try {
      return await forwardRequest(parts.broker, parts.from, parts.owner, parts.request);
    } catch (error) {
      if (!(error instanceof NoResponderError) || tries >= NO_RESPONDER_TRIES) throw error;
      await new Promise((resolve) => setTimeout(resolve, NO_RESPONDER_RETRY_MS));
    }
  }
}
