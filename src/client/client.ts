import WebSocket from 'ws';
import {
  type OpenSocket,
  MetisClient as StreamClient,
  type ClientOptions as StreamClientOptions,
} from './stream-client.js';

export {
  type ClientFailure,
  type ClientItem,
  type FilterSpec,
  receivesEverySeq,
  type StandardSocket,
} from './stream-client.js';

/** Node's socket: `ws`, which sends the bearer token as a header on the upgrade too. */
const openNodeSocket: OpenSocket = (url, headers) => new WebSocket(url, { headers });

export type ClientOptions = Omit<StreamClientOptions, 'openSocket'> & { readonly openSocket?: OpenSocket };

/** The streaming client on Node (`ws`); see {@link StreamClient} for what it does. */
export class MetisClient extends StreamClient {
  constructor(options: ClientOptions) {
    super({ ...options, openSocket: options.openSocket ?? openNodeSocket });
  }
}
