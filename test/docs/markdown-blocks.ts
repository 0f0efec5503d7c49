/** A fenced TypeScript block of a Markdown document. */
export interface TypeScriptBlock {
  /** The 1-based line of the opening fence; the code starts on the next line. */
  readonly fenceLine: number;
  readonly code: string;
  /** The reason given by a `<!-- not-checked: reason -->` line right before the fence, or null. */
  readonly exempt: string | null;
  /** The info string names `runs` (```ts runs): the block is a whole program that the suite also executes. */
  readonly runs: boolean;
}

/** What {@link typeScriptBlocks} found: the blocks, and the 1-based lines of exemption markers that exempt nothing. */
export interface ScannedDocument {
  readonly blocks: TypeScriptBlock[];
  readonly strayMarkers: number[];
}

const marker = /^<!--\s*not-checked:\s*(\S.*?)\s*-->$/;

/**
 * The TypeScript blocks of a Markdown text: fences of three or more backticks or tildes (indented at most three
 * spaces, as CommonMark allows) whose info string starts with `ts` or `typescript`. A fence closes only on a line of
 * the same character at least as long, so a longer fence may quote a shorter one. An unclosed block runs to the end.
 */
export function typeScriptBlocks(text: string): ScannedDocument {
  const lines = text.split(/\r?\n/);
  const blocks: TypeScriptBlock[] = [];
  const strayMarkers: number[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (marker.test(line.trim())) {
      const next = /^ {0,3}(`{3,}|~{3,})\s*(\w*)/.exec(lines[i + 1] ?? "");
      const language = next?.[2]?.toLowerCase();
      if (language !== "ts" && language !== "typescript") strayMarkers.push(i + 1);
      continue;
    }
    const open = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)([^`]*)$/.exec(line);
    if (open === null) continue;
    const fence = open[1]!;
    const close = new RegExp(`^ {0,3}${fence[0] === "`" ? "`" : "~"}{${fence.length},}\\s*$`);
    let end = i + 1;
    while (end < lines.length && !close.test(lines[end]!)) end++;
    const language = open[2]!.toLowerCase();
    if (language === "ts" || language === "typescript") {
      const exempt = marker.exec(lines[i - 1]?.trim() ?? "");
      blocks.push({
        fenceLine: i + 1,
        code: lines.slice(i + 1, end).join("\n"),
        exempt: exempt?.[1] ?? null,
        runs: (open[3] ?? "").trim().split(/\s+/).includes("runs"),
      });
    }
    i = end;
  }
  return { blocks, strayMarkers };
}
