"""The MCP prompts: `remember` and `recall` (Claude Code shows MCP prompts as slash commands)."""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from pydantic import Field


def add_prompts(mcp: MCPServer) -> None:
    @mcp.prompt(title="Remember", description="Store a note in today's memory log.")
    def remember(
        note: Annotated[str, Field(description="what to remember")],
        topic: Annotated[str, Field(description="a short title for the entry")] = "",
    ) -> str:
        heading = f' with topic "{topic}"' if topic else " with a short topic you choose"
        return (
            f"Store the note below in memory with the memory_write tool (mode append, no path: today's daily "
            f"log){heading}. Keep it as written; fix only obvious typos. Then confirm in one line where it went.\n\n"
            f"{note}"
        )

    @mcp.prompt(title="Recall", description="Search memory and summarise what it says.")
    def recall(question: Annotated[str, Field(description="what you want to know")]) -> str:
        return (
            "Search memory with the memory_search tool for the question below (try a second phrasing if the first "
            "finds little; read around the best hits with memory_get). Then answer from what memory says, citing "
            "each fact as path#Lx-Ly, and say plainly when memory holds nothing on it.\n\n"
            f"Question: {question}"
        )
