/**
 * The browser entry of the client library: the same streaming client (reconnect, resume from the
 * cursor, snapshot on `cursor_expired`, duplicate and `seq` checks) and the same reducer as on Node,
 * on the global `WebSocket` and `fetch`, with no Node built-in. The server's WebSocket URL carries a
 * single-use attach token, so no header is needed on the upgrade; the HTTP calls send the bearer
 * token. A page on another origin must be in `server.allowed_origins` (or be a loopback origin).
 */
import { type ClientOptions, type OpenSocket, MetisClient as StreamClient } from './stream-client.js';

export { type ConversationState, type Frame, initialState, reduce } from './reducer.js';
export {
  type ClientFailure,
  type ClientItem,
  type FilterSpec,
  receivesEverySeq,
} from './stream-client.js';

const openBrowserSocket: OpenSocket = (url) => new globalThis.WebSocket(url);

/** The streaming client on the browser's `WebSocket`. */
export class MetisClient extends StreamClient {
  constructor(options: Omit<ClientOptions, 'openSocket'>) {
    super({ ...options, openSocket: openBrowserSocket });
  }
}
