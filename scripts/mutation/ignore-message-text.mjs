// A Stryker ignorer: skips mutants of message text, which no protocol rule depends on (docs/mutation.md).
// A string or template literal is message text when it is
//   1. an argument of a call or `new` whose callee name ends in "Error" (`new ShardLeaseUnavailableError(...)`,
//      `configError(...)`): the message and the field name a user reads;
//   2. a message argument (after the first) of `assert(...)` / `assert.xxx(...)`;
//   3. prose: its fixed text contains a space. Protocol tokens (effect kinds, phases, statuses, outcomes, separators)
//      are single words, so they stay mutated;
// and it also skips
//   4. the fields object of a log line, `this.log(level, { ...fields }, message)` in the node core: diagnostics an
//      operator reads, like the message. The level stays mutated.
import { declareValuePlugin, PluginKind } from "@stryker-mutator/api/plugin";

function calleeName(node) {
  if (node.type !== "CallExpression" && node.type !== "NewExpression") return undefined;
  if (node.callee.type === "Identifier") return node.callee.name;
  if (node.callee.type === "MemberExpression" && node.callee.object.type === "Identifier") {
    return node.callee.object.name;
  }
  return undefined;
}

function fixedText(node) {
  if (node.type === "StringLiteral") return node.value;
  return node.quasis.map((q) => q.value.cooked ?? q.value.raw).join("");
}

/** Whether `node` is a call `this.log(...)` (the node core's log effect: level, fields, message). */
function isLogCall(node) {
  return (
    node?.type === "CallExpression" &&
    node.callee.type === "MemberExpression" &&
    node.callee.object.type === "ThisExpression" &&
    node.callee.property.type === "Identifier" &&
    node.callee.property.name === "log"
  );
}

export const ignoreMessageText = {
  shouldIgnore(path) {
    // 4. The fields of a log line (`this.log(level, { shard, error: e.message }, "…")`): what an operator reads
    //    beside the message. The level and whether a line is logged at all stay mutated.
    const parentNode = path.parentPath?.node;
    if (isLogCall(parentNode) && parentNode.arguments.indexOf(path.node) === 1) return "log fields";
    if (!path.isStringLiteral() && !path.isTemplateLiteral()) return undefined;
    if (fixedText(path.node).includes(" ")) return "message text (prose)";
    const parent = path.parentPath?.node;
    if (parent === undefined || parent === null) return undefined;
    const name = calleeName(parent);
    if (name === undefined || !parent.arguments.includes(path.node)) return undefined;
    if (name.endsWith("Error")) return "message text of an error";
    if (name === "assert" && parent.arguments.indexOf(path.node) > 0) return "message text of an assertion";
    return undefined;
  },
};

export const strykerPlugins = [declareValuePlugin(PluginKind.Ignore, "message-text", ignoreMessageText)];
