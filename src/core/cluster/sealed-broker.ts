import type { Logger } from 'pino';
import type { Broker, BrokerConnection } from './broker.js';
import { associatedData, messageSealer, type SealedKind, sealId } from './message-seal.js';
import { sparingWarner } from './sparing-warnings.js';

/** The broker as a node uses it, and how many messages it dropped. */
export interface SealedBroker extends Broker {
  /** Messages, requests and answers dropped since the start because they did not open with the key. */
  unopened(): number;
}

const NOT_OURS = 'sent by a node with another token, or by a client outside the cluster';

/**
 * The broker with every message sealed under the cluster's key (message-seal.ts): what is published,
 * each request and each answer. What does not open (sealed under another token, written by any client
 * the broker lets in, changed or moved to another subject) is dropped, counted and logged (sparingly),
 * never handed on; a request that does not open gets `refuse`'s answer, unsealed. A node never hears
 * its own publications (the mirror would drop them anyway: opening them would be work for nothing).
 */
export function sealBroker(connection: BrokerConnection, sealingKey: Buffer, logger: Logger): SealedBroker {
  const sealer = messageSealer(sealingKey);
  const warn = sparingWarner(logger);
  let unopened = 0;
  const dropped = (kind: SealedKind, subject: string, headers?: Readonly<Record<string, string>>) => {
    unopened += 1;
    warn(
      { subject, ...(headers === undefined ? {} : { headers }), unopened_total: unopened },
      `dropped a broker ${kind} that does not open with this cluster's key: ${NOT_OURS}`,
    );
  };
  return {
    get state() {
      return connection.state;
    },
    unopened: () => unopened,
    publish(subject, data, meta) {
      if (connection.state === 'closed') return;
      connection.publish(subject, sealer.seal(associatedData('message', subject, meta), data), meta);
    },
    subscribe(subject, handler) {
      return connection.subscribe(subject, (message) => {
        if (sealer.sealedHere(message.data)) return;
        const text = sealer.open(associatedData('message', message.subject, message.headers), message.data);
        if (text === null) {
          dropped('message', message.subject, message.headers);
          return;
        }
        handler({
          subject: message.subject,
          data: text,
          header: (name) => message.headers[name] || undefined,
        });
      });
    },
    async request(subject, data, timeoutMs) {
      const sealed = sealer.seal(associatedData('request', subject), data);
      const reply = await connection.request(subject, sealed, timeoutMs);
      const text = sealer.open(associatedData('reply', subject, undefined, sealId(sealed)), reply);
      if (text === null) {
        unopened += 1;
        throw new Error(`the answer on ${subject} does not open with this cluster's key: ${NOT_OURS}`);
      }
      return text;
    },
    respond(subject, answer, refuse) {
      return connection.respond(subject, async (data) => {
        const text = sealer.open(associatedData('request', subject), data);
        if (text === null) {
          dropped('request', subject);
          return refuse === undefined
            ? null
            : Buffer.from(refuse(`it does not open with this cluster's key`));
        }
        return sealer.seal(associatedData('reply', subject, undefined, sealId(data)), await answer(text));
      });
    },
    flush: () => connection.flush(),
    onReconnect: (listener) => connection.onReconnect(listener),
    onDisconnect: (listener) => connection.onDisconnect(listener),
    close: () => connection.close(),
  };
}
