// snapstore hook opencode: a checkpoint around each file-changing tool call of OpenCode.
// Written by `snapstore integrate opencode`, which replaces or --removes it only while it is
// unchanged. Each event runs `snapstore hook opencode` synchronously (the checkpoint before a tool
// call must be taken before the tool runs) with one JSON object on stdin; it never blocks a tool
// call, and a failure is logged where `snapstore doctor` shows it.
import { spawnSync } from "node:child_process"
import { appendFileSync, mkdirSync } from "node:fs"
import { homedir } from "node:os"
import { join } from "node:path"

const SNAPSTORE = __SNAPSTORE_ARGV__

const logFailure = (what) => {
  try {
    const dir = join(process.env.XDG_STATE_HOME || join(homedir(), ".local", "state"), "snapstore")
    mkdirSync(dir, { recursive: true, mode: 0o700 })
    const stamp = new Date().toISOString().slice(0, 19)
    appendFileSync(join(dir, "hook-failures.log"), `${stamp} opencode: ${SNAPSTORE.join(" ")} ${what}; the tool call went on\n`, { mode: 0o600 })
  } catch (error) {
    // a log that cannot be written must not fail the tool call either
  }
}

export const Snapstore = async ({ directory }) => {
  const send = (event) => {
    try {
      const run = spawnSync(SNAPSTORE[0], [...SNAPSTORE.slice(1), "hook", "opencode"], {
        input: JSON.stringify({ ...event, directory }),
        cwd: directory,
        stdio: ["pipe", "ignore", "ignore"],
        timeout: 20000,
      })
      if (run.error) logFailure(`could not run (${run.error.code || run.error.message})`)
      else if (run.status !== 0) logFailure(`exited ${run.status === null ? run.signal : run.status}`)
    } catch (error) {
      logFailure(`failed (${error})`)  // snapstore missing or failing must never fail the agent's tool call
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
