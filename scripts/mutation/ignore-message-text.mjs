// A Stryker ignorer: skips mutants of message text, which no protocol rule depends on.
// The rule (docs/mutation.md): a string or template literal is message text when it is passed directly as an argument
// to `new SomethingError(...)` or as the message argument (after the first) of an `assert.xxx(...)` call. Every other
// literal (effect kinds, phases, statuses, outcomes) is behaviour and stays mutated.
import { declareValuePlugin, PluginKind } from "@stryker-mutator/api/plugin";

function isErrorConstruction(node) {
  return node.type === "NewExpression" && node.callee.type === "Identifier" && /Error$/.test(node.callee.name);
}

function isAssertCall(node) {
  const callee = node.type === "CallExpression" ? node.callee : undefined;
  if (callee === undefined) return false;
  if (callee.type === "Identifier") return callee.name === "assert";
  return callee.type === "MemberExpression" && callee.object.type === "Identifier" && callee.object.name === "assert";
}

export const ignoreMessageText = {
  shouldIgnore(path) {
    if (!path.isStringLiteral() && !path.isTemplateLiteral()) return undefined;
    const parent = path.parentPath?.node;
    if (parent === undefined || parent === null) return undefined;
    if (isErrorConstruction(parent) && parent.arguments.includes(path.node)) return "message text of an error";
    if (isAssertCall(parent) && parent.arguments.indexOf(path.node) > 0) return "message text of an assertion";
    return undefined;
  },
};

export const strykerPlugins = [declareValuePlugin(PluginKind.Ignore, "message-text", ignoreMessageText)];
