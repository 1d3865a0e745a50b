// snapstore hook opencode: a checkpoint around each file-changing tool call of OpenCode.
// Written by `snapstore integrate opencode`; `snapstore integrate opencode --remove` takes it out.
// Each event runs `snapstore hook opencode` synchronously (the checkpoint before a tool call must
// be taken before the tool runs) with one JSON object on stdin; it never blocks a tool call.
import { spawnSync } from "node:child_process"

export const Snapstore = async ({ directory }) => {
  const send = (event) => {
    try {
      spawnSync("snapstore", ["hook", "opencode"], {
        input: JSON.stringify({ ...event, directory }),
        cwd: directory,
        stdio: ["pipe", "ignore", "ignore"],
        timeout: 20000,
      })
    } catch (error) {
      // snapstore missing or failing must never fail the agent's tool call
    }
  }
  return {
    "chat.message": async (input, output) => {
      const parts = (output && output.parts) || []
      const text = parts.filter((p) => p && p.type === "text").map((p) => p.text).join("\n")
      send({ hook_event_name: "chat.message", sessionID: input.sessionID, prompt: text })
    },
    "tool.execute.before": async (input, output) => {
      send({ hook_event_name: "tool.execute.before", sessionID: input.sessionID, callID: input.callID, tool: input.tool, args: output && output.args })
    },
    "tool.execute.after": async (input, output) => {
      const metadata = (output && output.metadata) || {}
      send({ hook_event_name: "tool.execute.after", sessionID: input.sessionID, callID: input.callID, tool: input.tool, args: input.args, exit: metadata.exit })
    },
    event: async ({ event }) => {
      if (event && (event.type === "session.idle" || event.type === "session.compacted")) {
        send({ hook_event_name: event.type, sessionID: event.properties && event.properties.sessionID })
      }
    },
  }
}
