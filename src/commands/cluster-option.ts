import type { z } from 'zod';
import type { ClusterSettings } from '../core/cluster/cluster-start.js';
import { ClusterConfigSchema, type MetisConfig } from '../core/config/schema.js';
import { MetisError } from '../core/errors.js';

/**
 * Applies `--nats` (else `$METIS_NATS_URL`) and `--node-id` over the config's `cluster` section, each
 * checked as the config checks it and refused naming the flag (exit 2). Returns where each came from.
 */
export function pickCluster(
  options: { readonly nats?: string; readonly nodeId?: string; readonly advertiseUrl?: string },
  config: MetisConfig,
): ClusterSettings {
  const fromEnv = process.env.METIS_NATS_URL;
  const [nats, natsSetting] =
    options.nats !== undefined
      ? [options.nats, '--nats']
      : fromEnv !== undefined && fromEnv !== ''
        ? [fromEnv, '$METIS_NATS_URL']
        : [null, undefined];
  if (nats !== null) config.cluster.nats = checked(ClusterConfigSchema.shape.nats, nats, natsSetting!);
  if (options.nodeId !== undefined)
    config.cluster.node_id = checked(ClusterConfigSchema.shape.node_id, options.nodeId, '--node-id');
  if (options.advertiseUrl !== undefined)
    config.cluster.advertise_url = checked(
      ClusterConfigSchema.shape.advertise_url,
      options.advertiseUrl,
      '--advertise-url',
    );
  return { nats: natsSetting, nodeId: options.nodeId === undefined ? undefined : '--node-id' };
}

function checked<T>(schema: z.ZodType<T>, value: string, setting: string): T {
  const result = schema.safeParse(value);
  if (!result.success)
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `${setting}: ${result.error.issues[0]?.message ?? 'invalid'}`,
    );
  return result.data;
}
