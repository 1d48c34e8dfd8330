import { RE2JS } from 're2js';

/**
 * The one place that knows which engine runs routing rules. Rules are matched by RE2 (the pure-JS port
 * `re2js`): its automata run in time linear in the message, so no pattern an operator writes can hold
 * the event loop (issue 12, observation 6: `^(a+)+$` against 28 characters blocked the server for
 * seconds under V8's backtracking engine). A static check such as safe-regex2 was measured and passes
 * `(a|a)*$`, which blocks V8 for 2.5 s on 28 characters; see docs/decisions.md "Routing rules run on RE2".
 *
 * Patterns are written in JavaScript syntax and translated (named groups, `\u` escapes, `[^]`); what RE2
 * cannot run in linear time (lookaround, backreferences, huge repeat counts) is refused at config load.
 */

/** A compiled routing rule pattern: case-insensitive, unanchored like `RegExp.prototype.test`. */
export interface RoutingPattern {
  test(text: string): boolean;
}

export type CompiledPattern =
  | { readonly ok: true; readonly pattern: RoutingPattern }
  | { readonly ok: false; readonly reason: string };

/** Longest pattern accepted: keeps compile time and the automaton's size small. */
export const MAX_PATTERN_LENGTH = 1000;

/** Compiles a rule's `match`; never throws. */
export function compileRoutingPattern(source: string): CompiledPattern {
  if (source.length > MAX_PATTERN_LENGTH) {
    return { ok: false, reason: `is longer than ${MAX_PATTERN_LENGTH} characters` };
  }
  try {
    new RegExp(source, 'i');
  } catch (error) {
    return { ok: false, reason: `is not a valid regular expression (${(error as Error).message})` };
  }
  try {
    const compiled = RE2JS.compile(RE2JS.translateRegExp(source), RE2JS.CASE_INSENSITIVE);
    return { ok: true, pattern: { test: (text) => compiled.test(text) } };
  } catch (error) {
    const detail = (error as Error).message.replace(/^error parsing regexp: /, '');
    return {
      ok: false,
      reason:
        `cannot be matched in linear time (${detail}); routing rules run on RE2, which has no ` +
        'lookahead, lookbehind or backreferences and caps repeat counts at 1000',
    };
  }
}

const cache = new Map<string, RoutingPattern>();

/**
 * The compiled pattern of a rule that passed config validation, compiled once per process. A pattern
 * that fails here never matches (config validation already refused it; this is only reached by a
 * config built without the schema).
 */
export function routingPattern(source: string): RoutingPattern {
  let pattern = cache.get(source);
  if (pattern === undefined) {
    const compiled = compileRoutingPattern(source);
    pattern = compiled.ok ? compiled.pattern : { test: () => false };
    cache.set(source, pattern);
  }
  return pattern;
}
