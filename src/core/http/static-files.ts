import { createHash } from 'node:crypto';
import { createReadStream, realpathSync, statSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { extname, join, resolve, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { sendError } from './http-util.js';
import { type RawRoute, type RouteCall, rawRoute } from './routes.js';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.map': 'application/json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.txt': 'text/plain; charset=utf-8',
};

/** A file name with a content hash (`app.3f9a1c2b.js`, Vite's `app-3f9a1c2b.js`): cached for good. */
const HASHED = /[.-][0-9a-zA-Z_]{8,}\.[a-z0-9]+$/;

/**
 * No inline script or style, nothing from another origin (no CDN): the page may talk to this server
 * only. `frame-ancestors 'none'`: no other site may frame it.
 */
export const CONTENT_SECURITY_POLICY =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
  "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/**
 * Static files (the dashboard's build) from `root`: `/` is `index.html`, `/assets/…` the rest. A path
 * that leaves the folder, by `..` or by a symlink, is not found; hashed names are cached for a year and
 * immutable, the rest revalidated by ETag; HTML gets a strict Content-Security-Policy. Requests are
 * checked (Host, Origin, token) before this, as every request.
 */
export function staticRoutes(root: string): RawRoute[] {
  const base = realpathSync(root);
  const serve = async ({ request, url }: RouteCall, response: ServerResponse): Promise<void> => {
    const path = url.pathname;
    const file = fileOf(base, path === '/' ? '/index.html' : path);
    if (file === null) return sendError(response, 404, 'METIS_ERR_NOT_FOUND', `no file ${path}`);
    const info = statSync(file);
    const etag = `"${createHash('sha1').update(`${info.size}:${info.mtimeMs}`).digest('hex').slice(0, 16)}"`;
    const type = TYPES[extname(file).toLowerCase()] ?? 'application/octet-stream';
    const headers: Record<string, string> = {
      'content-type': type,
      etag,
      'x-content-type-options': 'nosniff',
      'cache-control': HASHED.test(file) ? 'public, max-age=31536000, immutable' : 'no-cache',
      ...(type.startsWith('text/html') ? { 'content-security-policy': CONTENT_SECURITY_POLICY } : {}),
    };
    if (request.headers['if-none-match'] === etag) {
      response.writeHead(304, headers).end();
      return;
    }
    response.writeHead(200, { ...headers, 'content-length': String(info.size) });
    if (request.method === 'HEAD') response.end();
    // A file that goes away between stat and open (a rebuild) ends this answer, not the process.
    else await pipeline(createReadStream(file), response).catch(() => response.destroy());
  };
  const page = { status: 200, description: 'the file', contentType: 'text/html' };
  return [
    rawRoute(
      { method: 'GET', path: '/', head: true, summary: 'The dashboard', success: page, errors: [] },
      serve,
    ),
    rawRoute(
      {
        method: 'GET',
        path: '/assets/{file}',
        frameworkUrl: '/assets/*',
        head: true,
        summary: "The dashboard's scripts, styles and images",
        success: { ...page, contentType: 'application/octet-stream' },
        errors: ['METIS_ERR_NOT_FOUND'],
      },
      serve,
    ),
  ];
}

/** The file a URL path names inside `base`, or null: missing, a folder, or outside it. */
function fileOf(base: string, urlPath: string): string | null {
  let decoded: string;
  try {
    decoded = decodeURIComponent(urlPath);
  } catch {
    return null;
  }
  if (decoded.includes('\0')) return null;
  const candidate = resolve(join(base, decoded));
  if (!candidate.startsWith(base + sep)) return null;
  try {
    // The real path decides: a symlink inside that points outside is outside.
    const real = realpathSync(candidate);
    if (!real.startsWith(base + sep) || !statSync(real).isFile()) return null;
    return real;
  } catch {
    return null;
  }
}
