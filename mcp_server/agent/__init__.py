"""The text-to-SQL agent: the episode loop, the model's protocol (prompts, chat format, reply parsing, tool
turns), its policies (local engine, endpoint, replay), outcomes and voting. It knows nothing of MCP."""

from mcp_server.agent.loop import Agent, AgentAnswer, AgentConfig, RoundEvent

__all__ = ["Agent", "AgentAnswer", "AgentConfig", "RoundEvent"]
