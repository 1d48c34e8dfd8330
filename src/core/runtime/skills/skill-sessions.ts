import type { Logger } from 'pino';
import type { EventBus } from '../../bus/event-bus.js';
import { isMetisError } from '../../errors.js';
import { ToolError } from '../tools/tool.js';
import { type Skill, tokensOf } from './skill-file.js';
import {
  findSkill,
  globalSkillsDir,
  readLibrary,
  SkillNotFoundError,
  type SkillRoots,
  searchSkills,
  skillRoots,
} from './skill-library.js';

/** What the skills of a session need to know (`runtime.skills`). */
export interface SkillSessionsOptions {
  readonly bus: EventBus;
  /** Most tokens of skills one session may load (`always` ones included). */
  readonly budgetTokens: number;
  /** The global skills folder (`$METIS_HOME/skills` unless configured). */
  readonly globalDir: string;
  readonly logger?: Logger;
}

/** Where a load or a search is recorded: the tool call's session, turn, use and `llm.call_completed`. */
export interface SkillCallContext {
  readonly sessionId: string;
  readonly turnId: string;
  readonly toolUseId: string;
  readonly workspacePath: string;
  readonly callCompletedEventId: string | null;
}

interface SessionSkills {
  /** The session's `session.created` (or `session.resumed`, in a process that took it up): the parent of its `always` loads. */
  anchor: string | null;
  /** The system prompt's skills section, built at the session's first model call here. */
  section: Promise<string | null> | null;
  /** Tokens of skills loaded so far, against the budget. */
  used: number;
  readonly loaded: Map<string, number>;
  /** Skills a `skill_search` of the session returned: loading one is `auto_suggested`. */
  readonly suggested: Set<string>;
}

/** How many loadable skills the system prompt names (`skill_search` finds the rest). */
const INDEX_LIMIT = 30;

/**
 * The skills of each live session: its `always` skills, loaded into the system prompt at its first
 * model call, and what `skill_load` added, all counted against `runtime.skills.budget_tokens`. Every
 * load is `skill.loaded`; `always` ones parented on the session's start event, the others on the
 * `llm.call_completed` that asked. A session's state goes with its `session.ended`.
 */
export class SkillSessions {
  private readonly sessions = new Map<string, SessionSkills>();
  private detach: (() => void) | null = null;

  constructor(private readonly options: SkillSessionsOptions) {}

  get budgetTokens(): number {
    return this.options.budgetTokens;
  }

  /** Follows session starts and ends on the bus (the start event is the parent of `always` loads). */
  attach(): void {
    this.detach ??= this.options.bus.onEmit((event) => {
      if (event.type === 'session.created' || event.type === 'session.resumed') {
        this.state(event.session_id).anchor = event.id;
      } else if (event.type === 'session.ended') {
        this.sessions.delete(event.session_id);
      }
    });
  }

  close(): void {
    this.detach?.();
    this.detach = null;
  }

  roots(workspacePath: string): SkillRoots {
    return skillRoots(workspacePath, this.options.globalDir);
  }

  private state(sessionId: string): SessionSkills {
    let state = this.sessions.get(sessionId);
    if (state === undefined) {
      state = { anchor: null, section: null, used: 0, loaded: new Map(), suggested: new Set() };
      this.sessions.set(sessionId, state);
    }
    return state;
  }

  /**
   * The skills section of the session's system prompt: the `always` skills whole, then the names and
   * descriptions of the others. Built once, at the session's first model call (which loads the
   * `always` skills); later calls get the same text. Null when there are no skills at all.
   */
  systemSection(sessionId: string, turnId: string, workspacePath: string): Promise<string | null> {
    const state = this.state(sessionId);
    state.section ??= this.buildSection(state, sessionId, turnId, workspacePath).catch((error: unknown) => {
      const message = (error as Error).message;
      this.options.logger?.warn(
        { session_id: sessionId, err: message },
        'skills left out of the system prompt',
      );
      return `## Skills\nNot loaded: ${message}`;
    });
    return state.section;
  }

  private async buildSection(
    state: SessionSkills,
    sessionId: string,
    turnId: string,
    workspacePath: string,
  ): Promise<string | null> {
    const library = await readLibrary(this.roots(workspacePath));
    const loaded: string[] = [];
    const notes = library.problems.map((problem) => `Not loaded: ${problem.message}`);
    for (const skill of library.skills.values()) {
      if (skill.load !== 'always') continue;
      const tokens = tokensOf(skill.body);
      if (state.used + tokens > this.budgetTokens) {
        const why = `skill "${skill.name}" (${skill.path}) is ${tokens} tokens, over what is left of the ${this.budgetTokens}-token skill budget (runtime.skills.budget_tokens)`;
        this.options.logger?.warn({ session_id: sessionId, skill: skill.name }, why);
        notes.push(`Not loaded: ${why}`);
        continue;
      }
      this.record(state, skill, tokens, {
        sessionId,
        turnId,
        parent: state.anchor,
        reason: 'always',
        toolUseId: null,
      });
      loaded.push(`### Skill ${skill.name} (${skill.source}: ${skill.path})\n${skill.body}`);
    }
    const loadable = [...library.skills.values()].filter((skill) => skill.load !== 'always');
    if (loaded.length === 0 && loadable.length === 0 && notes.length === 0) return null;
    const parts = ['## Skills'];
    if (loaded.length > 0) parts.push('Skills loaded for this session:', ...loaded);
    if (loadable.length > 0) {
      const index = loadable.slice(0, INDEX_LIMIT).map((skill) => `- ${skill.name}: ${skill.description}`);
      const more =
        loadable.length > INDEX_LIMIT ? [`(${loadable.length - INDEX_LIMIT} more: use skill_search)`] : [];
      parts.push(
        'Skills you can load with the `skill_load` tool when a task needs one (`skill_search` finds them by description):',
        [...index, ...more].join('\n'),
      );
    }
    parts.push(...notes);
    return parts.join('\n\n');
  }

  private record(
    state: SessionSkills,
    skill: Skill,
    tokens: number,
    at: {
      sessionId: string;
      turnId: string;
      parent: string | null;
      reason: 'always' | 'on_demand' | 'auto_suggested';
      toolUseId: string | null;
    },
  ): void {
    state.used += tokens;
    state.loaded.set(skill.name, tokens);
    this.options.bus.emit({
      type: 'skill.loaded',
      session_id: at.sessionId,
      turn_id: at.turnId,
      parent_event_id: at.parent,
      payload: {
        skill_id: skill.name,
        skill_version: skill.version,
        load_reason: at.reason,
        load_size_tokens: tokens,
        source: skill.source,
        triggered_by_tool_use_id: at.toolUseId,
      },
    });
  }

  /**
   * `skill_load`: the skill (workspace over global) into the session's context. A skill loaded before
   * in the session is given again, not counted again and not recorded again. Over the budget, a
   * missing skill or a malformed SKILL.md: a `ToolError` naming it (the call is `tool.failed`).
   */
  async load(
    name: string,
    context: SkillCallContext,
  ): Promise<{ skill: Skill; tokens: number; again: boolean }> {
    const state = this.state(context.sessionId);
    let skill: Skill;
    try {
      skill = await findSkill(this.roots(context.workspacePath), name);
    } catch (error) {
      if (error instanceof SkillNotFoundError) throw new ToolError('not_found', error.message);
      if (isMetisError(error)) throw new ToolError('validation_error', error.message);
      throw error;
    }
    const before = state.loaded.get(skill.name);
    if (before !== undefined) return { skill, tokens: before, again: true };
    const tokens = tokensOf(skill.body);
    if (state.used + tokens > this.budgetTokens) {
      throw new ToolError(
        'execution_error',
        `skill "${skill.name}" (${skill.path}) is ${tokens} tokens and this session has used ${state.used} of its ${this.budgetTokens}-token skill budget (runtime.skills.budget_tokens): not loaded`,
      );
    }
    this.record(state, skill, tokens, {
      sessionId: context.sessionId,
      turnId: context.turnId,
      parent: context.callCompletedEventId,
      reason: state.suggested.has(skill.name) ? 'auto_suggested' : 'on_demand',
      toolUseId: context.toolUseId,
    });
    return { skill, tokens, again: false };
  }

  /**
   * `skill_search`: the skills whose name or description match the query, best first, recorded as
   * `skill.search`; they count as suggested, so loading one is `auto_suggested`. Malformed SKILL.md
   * files are left out and named in `problems`.
   */
  async search(query: string, context: SkillCallContext): Promise<{ results: Skill[]; problems: string[] }> {
    const library = await readLibrary(this.roots(context.workspacePath));
    const results = searchSkills(library.skills.values(), query);
    const state = this.state(context.sessionId);
    for (const skill of results) state.suggested.add(skill.name);
    this.options.bus.emit({
      type: 'skill.search',
      session_id: context.sessionId,
      turn_id: context.turnId,
      parent_event_id: context.callCompletedEventId,
      payload: { query, results_count: results.length, result_skill_ids: results.map((skill) => skill.name) },
    });
    return { results, problems: library.problems.map((problem) => problem.message) };
  }
}

/** The runtime's skills, following the bus from now on (`runtime.skills`; Runtime closes them). */
export function attachedSkillSessions(
  bus: EventBus,
  config: { readonly skills: { readonly budget_tokens: number; readonly global_dir: string | null } },
  logger?: Logger,
): SkillSessions {
  const skills = new SkillSessions({
    bus,
    budgetTokens: config.skills.budget_tokens,
    globalDir: globalSkillsDir(config.skills.global_dir),
    logger,
  });
  skills.attach();
  return skills;
}

/** The sections of a system prompt, blank-line separated; null when none has text. */
export function joinPrompts(parts: readonly (string | null | undefined)[]): string | null {
  const present = parts.filter((part): part is string => typeof part === 'string' && part !== '');
  return present.length === 0 ? null : present.join('\n\n');
}
