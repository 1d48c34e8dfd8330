import { z } from 'zod';
import type { RuntimeConfig } from '../../config/runtime-schema.js';
import { AdapterError, type TokenUsage } from '../model-adapter.js';
import type { ModelRegistry } from '../models/model-registry.js';
import { costOf } from '../pricing.js';
import type { SessionEvidence, TurnEvidence } from './evidence.js';
import { HeuristicJudge, type Judge, JudgeError, type Verdict } from './judge.js';

const JUDGE_TIMEOUT_MS = 60_000;

const AnswerSchema = z.object({
  score: z.number().min(0).max(1),
  confidence: z.number().min(0).max(1),
});

const RUBRIC = `You grade how well an AI assistant's turn (or session) went, from a structured summary of
what happened (no message text). 1 is a clear success: the model answered, tools worked, the user did
not retry, correct or abandon. 0 is a clear failure. Answer with one JSON object and nothing else:
{"score": <0..1>, "confidence": <0..1>}`;

/**
 * A judge that asks a model (`runtime.evaluator.judge_model`) to grade the evidence the heuristic judge
 * reads: the same structured summary, never the conversation's words, so a verdict stays pseudonymous.
 * A failed call is `judge_call_failed`; an answer that is not the JSON asked for, `judge_output_invalid`.
 */
export class LlmJudge implements Judge {
  readonly kind = 'llm' as const;
  readonly rubricId = 'metis.outcome-llm';
  readonly rubricVersion = '1';
  private readonly heuristic = new HeuristicJudge();

  constructor(
    readonly model: string,
    private readonly models: ModelRegistry,
    private readonly config: RuntimeConfig,
  ) {}

  judgeTurn(turn: TurnEvidence): Promise<Verdict> {
    return this.ask('turn', this.heuristic.judgeTurn(turn).signals);
  }

  judgeSession(session: SessionEvidence, turns: readonly Verdict[]): Promise<Verdict> {
    return this.ask('session', {
      ...this.heuristic.judgeSession(session, turns).signals,
      turn_scores: turns.map((t) => t.score),
    });
  }

  private async ask(subject: string, evidence: Record<string, unknown>): Promise<Verdict> {
    const resolution = this.models.resolve(this.model);
    if (!resolution.ok)
      throw new JudgeError('judge_call_failed', `${this.model} cannot serve (${resolution.failure})`);
    const prompt = `${RUBRIC}\n\nThe ${subject}:\n${JSON.stringify(evidence)}`;
    let text = '';
    let usage: TokenUsage;
    try {
      const stream = resolution.adapter.stream(
        {
          model: this.model,
          messages: [{ role: 'user', content: [{ type: 'text', text: prompt }] }],
          tools: [],
        },
        AbortSignal.timeout(JUDGE_TIMEOUT_MS),
      );
      for (;;) {
        const next = await stream.next();
        if (next.done) {
          usage = next.value.usage;
          break;
        }
        if (next.value.kind === 'text') text += next.value.text;
      }
    } catch (error) {
      const detail = error instanceof AdapterError ? `${error.errorClass}: ${error.message}` : String(error);
      throw new JudgeError('judge_call_failed', `${this.model} failed: ${detail}`);
    }
    const parsed = AnswerSchema.safeParse(jsonOf(text));
    if (!parsed.success)
      throw new JudgeError(
        'judge_output_invalid',
        `${this.model} did not answer {"score", "confidence"} in [0, 1]: ${text.slice(0, 120)}`,
      );
    return {
      ...parsed.data,
      signals: { ...evidence, judged_by: this.model },
      costUsd: costOf(this.model, usage, this.config),
      pricingVersion: this.config.pricing_version,
    };
  }
}

/** The answer as JSON: the whole text, or the body of one ```json fence; undefined when it is neither. */
function jsonOf(text: string): unknown {
  const fenced = /^\s*```(?:json)?\s*([\s\S]*?)\s*```\s*$/.exec(text);
  try {
    return JSON.parse(fenced ? fenced[1]! : text);
  } catch {
    return undefined;
  }
}
