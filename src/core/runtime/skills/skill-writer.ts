import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { EventBus } from '../../bus/event-bus.js';
import { MetisError } from '../../errors.js';
import { SYSTEM_SESSION_ID } from '../../events/envelope.js';
import { writeAtomically } from '../memory/memory-store.js';
import {
  hashOf,
  parseSkill,
  renderSkill,
  SKILL_FILE,
  SKILL_NAME,
  type SkillLoadMode,
  type SkillSource,
  tokensOf,
} from './skill-file.js';
import { SkillNotFoundError, type SkillRoots } from './skill-library.js';
import { describeFinding, type ScanReport, scanSkill } from './skill-scan.js';
import { editFrontMatter } from './skill-text.js';

/** What `metis skills create|edit` asks for; absent fields of an edit keep the file's. */
export interface SkillWriteRequest {
  readonly name: string;
  /** Write into the global folder instead of the workspace's. */
  readonly global: boolean;
  readonly description?: string;
  readonly body?: string;
  readonly load?: SkillLoadMode;
  /** Why the skill changed (an edit's `skill.modified.reason`). */
  readonly reason?: string;
  /** Write even when the security scan blocks the text. */
  readonly force?: boolean;
}

export interface SkillWriteResult {
  readonly name: string;
  readonly path: string;
  readonly source: SkillSource;
  /** False for an edit that left the file as it was (nothing written, nothing recorded). */
  readonly changed: boolean;
  readonly size_tokens: number;
  readonly scan: ScanReport;
  readonly before_hash: string | null;
  readonly after_hash: string;
  readonly diff_size_bytes: number | null;
  /** The `skill.created` or `skill.modified` recorded; null when nothing changed. */
  readonly event_id: string | null;
}

/**
 * Bytes removed plus bytes added between the texts, outside their common prefix and suffix: the size
 * of the one hunk that turns one into the other (an edit at both ends counts everything between).
 */
export function diffSizeBytes(before: string, after: string): number {
  const a = Buffer.from(before, 'utf8');
  const b = Buffer.from(after, 'utf8');
  const shorter = Math.min(a.length, b.length);
  let prefix = 0;
  while (prefix < shorter && a[prefix] === b[prefix]) prefix += 1;
  let suffix = 0;
  while (suffix < shorter - prefix && a[a.length - 1 - suffix] === b[b.length - 1 - suffix]) suffix += 1;
  return a.length - prefix - suffix + (b.length - prefix - suffix);
}

async function readText(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new MetisError(
      'METIS_ERR_INVALID_ARGUMENT',
      `skill file ${path} cannot be read (${(error as Error).message})`,
    );
  }
}

function refusedByScan(path: string, scan: ScanReport): MetisError {
  const lines = scan.findings.filter((f) => f.severity === 'block').map((f) => `  ${describeFinding(f)}`);
  return new MetisError(
    'METIS_ERR_INVALID_ARGUMENT',
    `skill file ${path} not written: the security scan blocked it (remove those lines, or pass --force to write it anyway, recorded as "blocked")\n${lines.join('\n')}`,
  );
}

/**
 * Writes skills by hand (`metis skills create|edit`, through the server): each file is checked as the
 * runtime will read it, scanned (skill-scan.ts), written atomically and recorded in the system session
 * with actor `user` and no parent (bus spec §6.6: manual changes have none).
 */
export class SkillWriter {
  /** One write at a time per file, across every writer of the process. */
  private static readonly queues = new Map<string, Promise<unknown>>();

  constructor(
    private readonly bus: EventBus,
    private readonly roots: SkillRoots,
  ) {}

  private serial<T>(path: string, task: () => Promise<T>): Promise<T> {
    const next = (SkillWriter.queues.get(path) ?? Promise.resolve()).then(task, task);
    const settled = next.catch(() => undefined);
    SkillWriter.queues.set(path, settled);
    void settled.then(() => {
      if (SkillWriter.queues.get(path) === settled) SkillWriter.queues.delete(path);
    });
    return next;
  }

  private where(request: SkillWriteRequest): { source: SkillSource; path: string } {
    if (!SKILL_NAME.test(request.name)) {
      throw new MetisError(
        'METIS_ERR_INVALID_ARGUMENT',
        `"${request.name}" is not a skill name (lowercase letters, digits, "-", "_", "."; at most 64)`,
      );
    }
    const source: SkillSource = request.global ? 'global' : 'workspace';
    const dir = request.global ? this.roots.global : this.roots.workspace;
    return { source, path: join(dir, request.name, SKILL_FILE) };
  }

  create(request: SkillWriteRequest): Promise<SkillWriteResult> {
    const { source, path } = this.where(request);
    return this.serial(path, async () => {
      if ((await readText(path)) !== null) {
        // The server's hint does not travel over HTTP: what to do goes in the message.
        throw new MetisError(
          'METIS_ERR_INVALID_ARGUMENT',
          `skill file ${path} already exists (\`metis skills edit ${request.name}${request.global ? ' --global' : ''}\` changes it)`,
        );
      }
      const text = renderSkill({
        name: request.name,
        description: request.description ?? '',
        load: request.load ?? 'on_demand',
        body: request.body ?? '',
      });
      const skill = parseSkill(text, path, request.name, source);
      const scan = scanSkill(text);
      if (scan.result === 'blocked' && !request.force) throw refusedByScan(path, scan);
      await writeAtomically(path, text);
      const event = this.bus.emit({
        type: 'skill.created',
        session_id: SYSTEM_SESSION_ID,
        turn_id: null,
        parent_event_id: null,
        actor: 'user',
        payload: {
          skill_id: skill.name,
          source: 'manual',
          source_session_id: null,
          size_tokens: tokensOf(skill.body),
          security_scan_result: scan.result,
          security_scan_findings: scan.findings.map(describeFinding),
        },
      });
      return {
        name: skill.name,
        path,
        source,
        changed: true,
        size_tokens: tokensOf(skill.body),
        scan,
        before_hash: null,
        after_hash: hashOf(text),
        diff_size_bytes: null,
        event_id: event?.id ?? null,
      };
    });
  }

  edit(request: SkillWriteRequest): Promise<SkillWriteResult> {
    const { source, path } = this.where(request);
    return this.serial(path, async () => {
      const before = await this.current(request, path);
      const text = editFrontMatter(before, request.name, {
        description: request.description,
        load: request.load,
        body: request.body,
      });
      const skill = parseSkill(text, path, request.name, source);
      const scan = scanSkill(text);
      if (scan.result === 'blocked' && !request.force) throw refusedByScan(path, scan);
      const base = {
        name: skill.name,
        path,
        source,
        size_tokens: tokensOf(skill.body),
        scan,
        before_hash: hashOf(before),
        after_hash: hashOf(text),
      };
      if (text === before) return { ...base, changed: false, diff_size_bytes: 0, event_id: null };
      await writeAtomically(path, text);
      const scanNote =
        scan.result === 'clean'
          ? ''
          : `; security scan: ${scan.result} (${scan.findings.length} finding${scan.findings.length === 1 ? '' : 's'})${scan.result === 'blocked' ? ', written with --force' : ''}`;
      const event = this.bus.emit({
        type: 'skill.modified',
        session_id: SYSTEM_SESSION_ID,
        turn_id: null,
        parent_event_id: null,
        actor: 'user',
        payload: {
          skill_id: skill.name,
          modification_type: 'edit',
          before_hash: base.before_hash,
          after_hash: base.after_hash,
          diff_size_bytes: diffSizeBytes(before, text),
          reason: `${request.reason?.trim() || 'metis skills edit'}${scanNote}`,
        },
      });
      return {
        ...base,
        changed: true,
        diff_size_bytes: diffSizeBytes(before, text),
        event_id: event?.id ?? null,
      };
    });
  }

  /**
   * The text an edit starts from. A malformed file may be edited (that is how it gets fixed) as long
   * as the result parses; a missing one is an error naming where it was looked for.
   */
  private async current(request: SkillWriteRequest, path: string): Promise<string> {
    const text = await readText(path);
    if (text !== null) return text;
    const globalPath = join(this.roots.global, request.name, SKILL_FILE);
    const other =
      !request.global && (await readText(globalPath).catch(() => null)) !== null ? globalPath : null;
    throw new SkillNotFoundError(
      other === null
        ? `no skill file ${path} to edit (\`metis skills create ${request.name}\` writes a new one)`
        : `no skill file ${path} to edit; "${request.name}" is a global skill (${other}): pass --global to edit it, or \`metis skills create ${request.name}\` to give the workspace its own`,
      { hint: '`metis skills list` shows the skills there are.' },
    );
  }
}
