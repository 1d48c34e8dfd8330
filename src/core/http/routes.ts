import type { IncomingMessage, ServerResponse } from 'node:http';
import type { z } from 'zod';
import type { RouteDoc } from './openapi.js';

/** What a handler is given: the path's parameters in template order, and the validated body and query. */
export interface RouteCall<Body = unknown, Query = unknown> {
  readonly request: IncomingMessage;
  readonly params: readonly string[];
  readonly body: Body;
  readonly query: Query;
  readonly url: URL;
}

/** A route answered with JSON: the handler returns the status and the body. */
export interface JsonRoute extends RouteDoc {
  readonly kind: 'json';
  readonly handle: (call: RouteCall<any, any>) => Promise<[number, unknown]>;
}

/**
 * A route that writes its own answer (a stream, a file, Prometheus text) on the raw response. The
 * framework still validates its body; its `query` is documentation, the route reads the query itself.
 */
export interface RawRoute extends RouteDoc {
  readonly kind: 'raw';
  /** Also answer HEAD (files, /metrics). */
  readonly head?: boolean;
  /** The framework's path when the template cannot say it: `/assets/*` for any file below. */
  readonly frameworkUrl?: string;
  readonly handle: (call: RouteCall<any, any>, response: ServerResponse) => Promise<void>;
}

export type Route = JsonRoute | RawRoute;

type Output<S> = S extends z.ZodType ? z.output<S> : undefined;

/**
 * A value of type T, read-only all the way down: a handler may hand back the store's readonly arrays
 * where the answer's schema (whose zod types are mutable) has plain ones.
 */
type Wire<T> = T extends readonly (infer E)[]
  ? readonly Wire<E>[]
  : T extends object
    ? { readonly [K in keyof T]: Wire<T[K]> }
    : T;

/** What a handler may answer: what `success.schema` describes, anything without one. */
type Answer<S> = S extends z.ZodType ? Wire<z.output<S>> : unknown;

/**
 * Declares a JSON route. The framework validates the body and the query with the schemas the doc
 * names (the same ones `GET /openapi.json` describes), so the handler gets them typed. The answer's
 * schema is checked against the handler at compile time only, so the document cannot drift from the
 * code while the bytes on the wire stay the handler's own.
 */
export function jsonRoute<
  B extends z.ZodType | undefined = undefined,
  Q extends z.ZodType | undefined = undefined,
  S extends z.ZodType | undefined = undefined,
>(
  doc: RouteDoc & {
    readonly body?: B;
    readonly query?: Q;
    readonly success: RouteDoc['success'] & { readonly schema?: S };
  },
  handle: (call: RouteCall<Output<B>, Output<Q>>) => Promise<[number, Answer<S>]>,
): JsonRoute {
  return { ...doc, kind: 'json', handle };
}

export function rawRoute<B extends z.ZodType | undefined = undefined>(
  doc: RouteDoc & { readonly body?: B; readonly head?: boolean; readonly frameworkUrl?: string },
  handle: (call: RouteCall<Output<B>, undefined>, response: ServerResponse) => Promise<void>,
): RawRoute {
  return { ...doc, kind: 'raw', handle };
}

/** `/sessions/{session_id}` as the framework spells it: `/sessions/:session_id`. */
export function frameworkPath(template: string): string {
  return template.replace(/\{([^}]+)\}/g, ':$1');
}

export function paramNames(template: string): string[] {
  return [...template.matchAll(/\{([^}]+)\}/g)].map((match) => match[1]!);
}
