import { z } from 'zod';
import { decimalString, defineEventType, isoDatetime } from '../define.js';

// Gateway admin and auth events (bus spec §6.13): all audit-flagged, all pseudonymous. The plaintext
// token never appears; keys are referenced by their stable gateway_key_id.

const InboundShapeSchema = z.enum(['openai', 'anthropic']);

export const gatewayKeyIssued = defineEventType({
  type: 'gateway.key_issued',
  domain: 'gateway',
  schema: z.strictObject({
    gateway_key_id: z.string().min(1),
    name: z.string(),
    workspace_path: z.string().min(1),
    issued_at: isoDatetime,
    user_id: z.string().nullable(),
    team_id: z.string().nullable(),
    allowed_models: z.array(z.string()).nullable(),
    daily_cap_usd: decimalString.nullable(),
    monthly_cap_usd: decimalString.nullable(),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '3',
  audit: true,
  parent: 'none',
  description: 'metis gateway issue-key wrote a new key to the keystore.',
});

export const gatewayKeyRevoked = defineEventType({
  type: 'gateway.key_revoked',
  domain: 'gateway',
  schema: z.strictObject({
    gateway_key_id: z.string().min(1),
    revoked_at: isoDatetime,
    reason: z.enum(['admin_revoke', 'grace_period_expired', 'rotated']),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '3',
  audit: true,
  parent: 'none (one-shot CLI operation)',
  description: 'A gateway key was revoked by an admin or its rotation grace period lapsed.',
});

export const gatewayKeyRotated = defineEventType({
  type: 'gateway.key_rotated',
  domain: 'gateway',
  schema: z.strictObject({
    old_gateway_key_id: z.string().min(1),
    new_gateway_key_id: z.string().min(1),
    grace_period_until: isoDatetime,
    workspace_path: z.string().min(1),
    user_id: z.string().nullable(),
    team_id: z.string().nullable(),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '3',
  audit: true,
  parent: 'none',
  description:
    'metis gateway rotate-key replaced a key; the old one stays valid until the grace period ends.',
});

// Named by §7.6 without a payload; see docs/decisions.md.
export const gatewayQuotaExceeded = defineEventType({
  type: 'gateway.quota_exceeded',
  domain: 'gateway',
  schema: z.strictObject({
    gateway_key_id: z.string().min(1),
    window: z.enum(['daily', 'monthly']),
    cap_usd: decimalString,
    spent_usd: decimalString,
    inbound_shape: InboundShapeSchema,
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '3',
  audit: true,
  parent: 'none (pre-routing rejection)',
  description: "The gateway rejected a request because the key's daily or monthly spend cap is reached.",
});

export const gatewayAuthFailed = defineEventType({
  type: 'gateway.auth_failed',
  domain: 'gateway',
  schema: z.strictObject({
    reason: z.enum(['missing_token', 'invalid_token', 'key_revoked']),
    inbound_shape: InboundShapeSchema,
    token_hash_prefix: z
      .string()
      .regex(/^[0-9a-f]{8}$/, 'must be the first 8 hex characters of a SHA-256')
      .nullable(),
    gateway_key_id: z.string().nullable(),
  }),
  sensitivity: 'pseudonymous',
  actors: ['system'],
  phase: '3',
  audit: true,
  parent: 'none (pre-routing rejection)',
  description: "The gateway's auth gate rejected a request before routing.",
});

export const gatewayEvents = [
  gatewayKeyIssued,
  gatewayKeyRevoked,
  gatewayKeyRotated,
  gatewayQuotaExceeded,
  gatewayAuthFailed,
];
