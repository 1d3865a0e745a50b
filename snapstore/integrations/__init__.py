"""Agent integrations: the Claude Code hook, settings merging (``integrate``) and the MCP server.

Library code only (it uses the Store, never the CLI); the commands are in
``snapstore.cli.commands_agent``.
"""
