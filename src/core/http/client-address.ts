import type { IncomingMessage } from 'node:http';
import { BlockList, isIP } from 'node:net';
import { MetisError } from '../errors.js';

/**
 * The proxies whose `X-Forwarded-For` is believed (`server.trusted_proxies`): addresses (`127.0.0.1`,
 * `::1`) or CIDR ranges (`10.0.0.0/8`). Null when none is listed: then the peer is the client.
 * @throws MetisError METIS_ERR_CONFIG_INVALID naming the entry that is neither
 */
export function trustedProxies(entries: readonly string[]): BlockList | null {
  if (entries.length === 0) return null;
  const list = new BlockList();
  entries.forEach((entry, index) => {
    const [address = '', prefix] = entry.split('/');
    const family = isIP(address);
    const bits = prefix === undefined ? null : Number(prefix);
    const maxBits = family === 6 ? 128 : 32;
    if (family === 0 || (bits !== null && !(Number.isInteger(bits) && bits >= 0 && bits <= maxBits))) {
      throw new MetisError(
        'METIS_ERR_CONFIG_INVALID',
        `server.trusted_proxies.${index}: "${entry}" is not an IP address or a CIDR range like 10.0.0.0/8`,
      );
    }
    const type = family === 6 ? 'ipv6' : 'ipv4';
    if (bits === null) list.addAddress(address, type);
    else list.addSubnet(address, bits, type);
  });
  return list;
}

/** `::ffff:127.0.0.1`, as a dual-stack socket reports an IPv4 peer, is 127.0.0.1. */
function plain(address: string): string {
  return address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address;
}

function isTrusted(address: string, proxies: BlockList): boolean {
  const family = isIP(address);
  return family !== 0 && proxies.check(address, family === 6 ? 'ipv6' : 'ipv4');
}

/**
 * The address a request came from: the socket's peer, or, when that peer is a trusted proxy, the
 * nearest address in `X-Forwarded-For` that is not itself a trusted proxy (read from the right: each
 * proxy appends the address it saw, and what a client wrote on the left is whatever it chose).
 */
export function clientAddress(request: IncomingMessage, proxies: BlockList | null): string {
  const peer = plain(request.socket.remoteAddress ?? 'unknown');
  if (proxies === null || !isTrusted(peer, proxies)) return peer;
  const header = request.headers['x-forwarded-for'];
  const hops = (Array.isArray(header) ? header.join(',') : (header ?? ''))
    .split(',')
    .map((hop) => plain(hop.trim()))
    .filter((hop) => hop !== '');
  for (let i = hops.length - 1; i >= 0; i -= 1) {
    const hop = hops[i]!;
    if (isIP(hop) === 0) return peer; // A malformed chain names no one: the proxy itself is the client.
    if (!isTrusted(hop, proxies)) return hop;
  }
  return hops[0] ?? peer;
}
