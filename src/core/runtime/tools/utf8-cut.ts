/**
 * Length of the longest prefix of `data` that does not end inside a UTF-8 sequence: where a tool's
 * output may be cut without leaving half a character (which would decode as U+FFFD).
 */
export function completeUtf8Prefix(data: Buffer): number {
  for (let i = data.length - 1; i >= 0 && i >= data.length - 4; i--) {
    const byte = data[i]!;
    if ((byte & 0xc0) === 0x80) continue; // continuation byte: look further back
    const length = byte < 0x80 ? 1 : byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : 2;
    return i + length <= data.length ? data.length : i;
  }
  return data.length;
}
