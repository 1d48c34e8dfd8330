import type { z } from 'zod';
import type { CatalogEntry } from '../define.js';
import { analyticsEvents } from './analytics.js';
import { busEvents } from './bus.js';
import { delegateEvents } from './delegate.js';
import { evalEvents } from './eval.js';
import { feedbackEvents } from './feedback.js';
import { gatewayEvents } from './gateway.js';
import { llmEvents } from './llm.js';
import { memoryEvents } from './memory.js';
import { patternEvents } from './pattern.js';
import { providerEvents } from './provider.js';
import { quotaEvents } from './quota.js';
import { routeEvents } from './route.js';
import { sessionEvents } from './session.js';
import { skillEvents } from './skill.js';
import { toolEvents } from './tool.js';
import { traceEvents } from './trace.js';
import { turnEvents } from './turn.js';

/** The closed catalog (bus spec §6), in spec order. Adding a type here is a spec change. */
export const CATALOG_ENTRIES: readonly CatalogEntry[] = [
  ...sessionEvents,
  ...turnEvents,
  ...llmEvents,
  ...toolEvents,
  ...routeEvents,
  ...patternEvents,
  ...skillEvents,
  ...memoryEvents,
  ...delegateEvents,
  ...feedbackEvents,
  ...busEvents,
  ...providerEvents,
  ...evalEvents,
  ...gatewayEvents,
  ...traceEvents,
  ...quotaEvents,
  ...analyticsEvents,
];

/** Every entry, each with its own literal type and schema. */
type KnownEntry =
  | (typeof sessionEvents)[number]
  | (typeof turnEvents)[number]
  | (typeof llmEvents)[number]
  | (typeof toolEvents)[number]
  | (typeof routeEvents)[number]
  | (typeof patternEvents)[number]
  | (typeof skillEvents)[number]
  | (typeof memoryEvents)[number]
  | (typeof delegateEvents)[number]
  | (typeof feedbackEvents)[number]
  | (typeof busEvents)[number]
  | (typeof providerEvents)[number]
  | (typeof evalEvents)[number]
  | (typeof gatewayEvents)[number]
  | (typeof traceEvents)[number]
  | (typeof quotaEvents)[number]
  | (typeof analyticsEvents)[number];

/** The name of a catalog type: a misspelt one does not compile at an emitter. */
export type EventType = KnownEntry['type'];

/** The payload an emitter gives for `T` (fields the spec marks additive may be left out). */
export type PayloadOf<T extends EventType> = z.input<Extract<KnownEntry, { readonly type: T }>['schema']>;

export const CATALOG: ReadonlyMap<string, CatalogEntry> = new Map(CATALOG_ENTRIES.map((e) => [e.type, e]));

/** Types that retention never deletes (bus spec §7.6 plus the audit-flagged §6.13/§6.14 entries). */
export const AUDIT_EVENT_TYPES: ReadonlySet<string> = new Set(
  CATALOG_ENTRIES.filter((e) => e.audit).map((e) => e.type),
);

export const CATALOG_DOMAINS: readonly string[] = [...new Set(CATALOG_ENTRIES.map((e) => e.domain))];
