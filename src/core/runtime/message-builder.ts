import type { AdapterChunk, ContentBlock } from './model-adapter.js';
import { parseToolInput } from './models/conversation.js';

interface OpenToolUse {
  id: string;
  name: string;
  partialJson: string;
  finalInput: Record<string, unknown> | null;
}

/**
 * Rebuilds an assistant message from adapter chunks, block by block, and knows which tool_use blocks
 * are still open, so a cancel can close them (streaming spec §6.2.1).
 */
export class MessageBuilder {
  private readonly blocks = new Map<number, ContentBlock>();
  private readonly toolUses = new Map<number, OpenToolUse>();

  add(chunk: AdapterChunk): void {
    switch (chunk.kind) {
      case 'text': {
        const block = this.blocks.get(chunk.index);
        this.blocks.set(chunk.index, {
          type: 'text',
          text: (block?.type === 'text' ? block.text : '') + chunk.text,
        });
        return;
      }
      case 'thinking': {
        const block = this.blocks.get(chunk.index);
        const previous = block?.type === 'thinking' ? block : { thinking: '', signature: null };
        this.blocks.set(chunk.index, {
          type: 'thinking',
          thinking: previous.thinking + chunk.text,
          signature: chunk.signature ?? previous.signature,
        });
        return;
      }
      case 'redacted_thinking':
        this.blocks.set(chunk.index, { type: 'redacted_thinking', data: chunk.data });
        return;
      case 'tool_use_start':
        this.toolUses.set(chunk.index, {
          id: chunk.tool_use_id,
          name: chunk.tool_name,
          partialJson: '',
          finalInput: null,
        });
        return;
      case 'tool_input': {
        const open = this.toolUses.get(chunk.index);
        if (open) open.partialJson += chunk.partial_json;
        return;
      }
      case 'tool_use_end': {
        const open = this.toolUses.get(chunk.index);
        if (open) open.finalInput = chunk.final_input;
        return;
      }
    }
  }

  /** Tool uses started but not ended, with the input that parses cleanly so far (or `{}`). */
  openToolUses(): { index: number; tool_use_id: string; final_input: Record<string, unknown> }[] {
    const open: { index: number; tool_use_id: string; final_input: Record<string, unknown> }[] = [];
    for (const [index, toolUse] of this.toolUses) {
      if (toolUse.finalInput !== null) continue;
      open.push({ index, tool_use_id: toolUse.id, final_input: parseToolInput(toolUse.partialJson) });
    }
    return open;
  }

  /** The canonical content so far, in block order; open tool uses carry what parsed. */
  content(): ContentBlock[] {
    const indexes = [...new Set([...this.blocks.keys(), ...this.toolUses.keys()])].sort((a, b) => a - b);
    return indexes.map((index) => {
      const toolUse = this.toolUses.get(index);
      if (toolUse) {
        return {
          type: 'tool_use',
          id: toolUse.id,
          name: toolUse.name,
          input: toolUse.finalInput ?? parseToolInput(toolUse.partialJson),
        };
      }
      return this.blocks.get(index)!;
    });
  }

  toolUseBlocks(): Extract<ContentBlock, { type: 'tool_use' }>[] {
    return this.content().filter(
      (b): b is Extract<ContentBlock, { type: 'tool_use' }> => b.type === 'tool_use',
    );
  }
}
