import type { Logger } from 'pino';
import { withDeadline } from '../deadline.js';
import type { Broker } from './broker.js';
import { SUBJECT_PREFIX } from './event-fanout.js';
import { forwardChecker, signForward } from './forwarded-proof.js';
import { sparingWarner } from './sparing-warnings.js';

/** A request for a session another node runs, as it travels to that node. */
export interface ForwardedRequest {
  readonly method: string;
  /** Path and query, as the client sent them. */
  readonly url: string;
  /** The parsed JSON body, or null for none. */
  readonly body: unknown;
}

/** The owner's answer, passed back to the client as it is. */
export interface ForwardedAnswer {
  readonly status: number;
  readonly contentType: string | null;
  readonly body: string;
  /** The node that answered (the `Metis-Node` response header). */
  readonly node: string;
  /** Set when the node did not run the request: it did not carry the cluster's proof (forwarded-proof.ts). */
  readonly refused?: string;
}

/**
 * Marks a request a node makes for another: it is run where it lands, never forwarded again (two nodes
 * that disagree for a moment on who runs a session must not pass a request back and forth).
 */
export const FORWARDED_HEADER = 'x-metis-forwarded';

/** How long a forwarded request may run on the owner: a turn request answers at once (202), a cancel within seconds. */
export const FORWARD_TIMEOUT_MS = 30_000;
/** How long the node that forwards waits: longer than the owner may run, so its answer always arrives. */
const REPLY_TIMEOUT_MS = FORWARD_TIMEOUT_MS + 5_000;

/** The subject a node answers forwarded requests on. */
export function forwardSubject(nodeId: string): string {
  return `${SUBJECT_PREFIX}.node.${nodeId}.http`;
}

/** Who forwards: this node, and the key its requests are signed with (cluster-keys.ts). */
export interface Forwarder {
  readonly nodeId: string;
  readonly key: Buffer;
}

/**
 * Sends a request to the node that runs its session, over NATS request/reply, signed (forwarded-proof.ts),
 * and returns its answer.
 * @throws Error when the node does not answer (not connected to the broker, or too slow), or refuses the
 *   request's proof (another token, clocks too far apart): the client is then told where the session runs
 */
export async function forwardRequest(
  broker: Broker,
  from: Forwarder,
  owner: string,
  request: ForwardedRequest,
): Promise<ForwardedAnswer> {
  const signed = signForward(from.key, from.nodeId, owner, {
    method: request.method,
    url: request.url,
    body: request.body === null ? null : JSON.stringify(request.body),
  });
  const answer = JSON.parse(
    await broker.request(forwardSubject(owner), JSON.stringify(signed), REPLY_TIMEOUT_MS),
  ) as ForwardedAnswer;
  if (answer.refused !== undefined)
    throw new Error(`node ${owner} refused the forwarded request: ${answer.refused}`);
  return answer;
}

/** The answer to a forwarded request that does not carry the cluster's proof: nothing was run. */
function refusal(nodeId: string, reason: string): string {
  return JSON.stringify({
    status: 401,
    contentType: 'application/json',
    body: JSON.stringify({
      error: {
        code: 'METIS_ERR_UNAUTHORIZED',
        message: `node ${nodeId} runs a forwarded request only with the proof of the cluster's token, and ${reason}`,
      },
    }),
    node: nodeId,
    refused: reason,
  } satisfies ForwardedAnswer);
}

/** Runs a request in this node's own HTTP app, past its front door (http-app.ts `inject`). */
export type RunInProcess = (request: {
  readonly method: string;
  readonly url: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string | null;
}) => Promise<{ status: number; contentType: string | null; body: string }>;

/** A base no request may leave: a forwarded URL in absolute form would name another origin. */
const HERE = 'http://this-node.invalid';

/**
 * Answers the requests other nodes forward to this one by running them in this node's own HTTP app,
 * in process, once the request proves it comes from a node of the cluster (the same token, now, once:
 * forwarded-proof.ts). The node that received the request checked the client's token; the front door
 * is not passed again. Returns the function that stops it.
 */
export function answerForwarded(parts: {
  readonly broker: Broker;
  readonly nodeId: string;
  /** The forwarding key of the cluster (cluster-keys.ts). */
  readonly key: Buffer;
  readonly run: RunInProcess;
  readonly logger: Logger;
}): () => void {
  const check = forwardChecker(parts.key, parts.nodeId);
  const warn = sparingWarner(parts.logger);
  return parts.broker.respond(
    forwardSubject(parts.nodeId),
    async (data) => {
      const refuse = (status: number, message: string) =>
        JSON.stringify({
          status,
          contentType: 'application/json',
          body: JSON.stringify({ error: { code: 'METIS_ERR_INVALID_ARGUMENT', message } }),
          node: parts.nodeId,
        } satisfies ForwardedAnswer);
      let envelope: unknown = null;
      try {
        envelope = JSON.parse(data);
      } catch {
        // Refused below as carrying no proof.
      }
      const verdict = check(envelope);
      if (!verdict.ok) {
        // No URL, body or MAC in the log (a session's path names it, a body may quote it): the reason.
        warn({ reason: verdict.reason }, 'refused a forwarded request');
        return refusal(parts.nodeId, verdict.reason);
      }
      const request = verdict.request;
      let target: URL;
      try {
        target = new URL(request.url, HERE);
      } catch {
        return refuse(400, 'a forwarded request that does not parse');
      }
      // Only what a node forwards: a request on a session, on this node.
      if (target.origin !== HERE || !target.pathname.startsWith('/sessions/'))
        return refuse(
          400,
          `a forwarded request may only name a session's path on this node, not ${request.url}`,
        );
      return JSON.stringify(
        await runHere(parts, `${target.pathname}${target.search}`, request.method, request.body),
      );
    },
    (reason) => refusal(parts.nodeId, reason),
  );
}

/** Runs a forwarded request here, bounded as the node that forwarded it waits. */
async function runHere(
  parts: { readonly nodeId: string; readonly run: RunInProcess; readonly logger: Logger },
  url: string,
  method: string,
  /** The JSON text, as signed. */
  body: string | null,
): Promise<ForwardedAnswer> {
  // A change is JSON even with no body, as the API asks of every client (security.ts).
  const headers: Record<string, string> = {
    accept: 'application/json',
    [FORWARDED_HEADER]: '1',
    'content-type': 'application/json',
  };
  try {
    const answer = await withDeadline(
      parts.run({ method, url, headers, body }),
      FORWARD_TIMEOUT_MS,
      `forwarded ${method}`,
    );
    return { ...answer, node: parts.nodeId };
  } catch (error) {
    parts.logger.warn(
      { err: (error as Error).message, url: url.split('?')[0] },
      'a forwarded request failed here',
    );
    return {
      status: 502,
      contentType: 'application/json',
      body: JSON.stringify({
        error: {
          code: 'METIS_ERR_SESSION_ELSEWHERE',
          message: `node ${parts.nodeId} could not run the forwarded request: ${(error as Error).message}`,
        },
      }),
      node: parts.nodeId,
    };
  }
}
