import type { Logger } from 'pino';
import type { Broker } from './broker.js';
import { SUBJECT_PREFIX } from './event-fanout.js';

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

/**
 * Sends a request to the node that runs its session, over NATS request/reply, and returns its answer.
 * @throws Error when the node does not answer (not connected to the broker, or too slow)
 */
export async function forwardRequest(
  broker: Broker,
  owner: string,
  request: ForwardedRequest,
): Promise<ForwardedAnswer> {
  return JSON.parse(
    await broker.request(forwardSubject(owner), JSON.stringify(request), REPLY_TIMEOUT_MS),
  ) as ForwardedAnswer;
}

/**
 * Answers the requests other nodes forward to this one by making them to this node's own server, with
 * its own token: the node that received the request checked the client's (the nodes of a cluster trust
 * each other as members of one service). Returns the function that stops it.
 */
export function answerForwarded(parts: {
  readonly broker: Broker;
  readonly nodeId: string;
  /** This node's server, as it listens (a loopback address for one bound to all). */
  readonly localUrl: string;
  readonly token: string | null;
  readonly logger: Logger;
}): () => void {
  return parts.broker.respond(forwardSubject(parts.nodeId), async (data) => {
    const refuse = (status: number, message: string) =>
      JSON.stringify({
        status,
        contentType: 'application/json',
        body: JSON.stringify({ error: { code: 'METIS_ERR_INVALID_ARGUMENT', message } }),
        node: parts.nodeId,
      } satisfies ForwardedAnswer);
    let request: ForwardedRequest;
    let target: URL;
    try {
      request = JSON.parse(data) as ForwardedRequest;
      target = new URL(request.url, parts.localUrl);
    } catch {
      return refuse(400, 'a forwarded request that does not parse');
    }
    // Only what a node forwards: a request on a session, to this node's own server.
    if (target.origin !== new URL(parts.localUrl).origin || !target.pathname.startsWith('/sessions/'))
      return refuse(
        400,
        `a forwarded request may only name a session's path on this node, not ${request.url}`,
      );
    const headers: Record<string, string> = { accept: 'application/json', [FORWARDED_HEADER]: '1' };
    if (parts.token !== null) headers.authorization = `Bearer ${parts.token}`;
    if (request.body !== null) headers['content-type'] = 'application/json';
    let answer: ForwardedAnswer;
    try {
      const response = await fetch(target, {
        method: request.method,
        headers,
        body: request.body === null ? undefined : JSON.stringify(request.body),
        signal: AbortSignal.timeout(FORWARD_TIMEOUT_MS),
      });
      answer = {
        status: response.status,
        contentType: response.headers.get('content-type'),
        body: await response.text(),
        node: parts.nodeId,
      };
    } catch (error) {
      parts.logger.warn(
        { err: (error as Error).message, url: request.url },
        'a forwarded request failed here',
      );
      answer = {
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
    return JSON.stringify(answer);
  });
}
