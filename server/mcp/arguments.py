"""The types of the MCP tools' shared arguments, with the descriptions an agent reads in the tool schemas.

Numbers and flags are strict (here and in every tool's own arguments): JSON `true` is not the number 1, nor `"1"` or
`"yes"` a number or a flag, nor `2.0` a whole number; a float argument takes a JSON integer. The service refuses a
bool where it wants a number too, but pydantic's lax mode would convert it before the service could see it."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

FilePath = Annotated[str, Field(description="file path inside memory: MEMORY.md or memory/<folders>/<name>.md")]
Heading = Annotated[
    str | None,
    Field(
        description="a section by its heading text without the #s, e.g. 'Decisions', or a path 'Project > Decisions'"
        " (as search hits name them); matched exactly, then ignoring case. A section runs to the next heading of its"
        " level or higher, subsections included"
    ),
]
TagFilter = Annotated[
    list[str] | None, Field(description="only passages with any of these tags, e.g. ['database']", max_length=16)
]
CategoryFilter = Annotated[
    str | None, Field(description="only passages of this category (exact), e.g. decision, pattern, preference, fact")
]
Hash = Annotated[
    str | None,
    Field(description="sha256 of the file's current content (from memory_get or memory_list); 'absent' for none"),
]

MmrLambda = Annotated[
    float | None,
    Field(
        description="diversity: 1 ranks by relevance alone, lower values push near-duplicates down, 0-1", strict=True
    ),
]
RecencyHalfLife = Annotated[
    float | None,
    Field(description="favour recent daily logs: their scores halve per this many days; 0: off", strict=True),
]
Rerank = Annotated[
    bool | None, Field(description="reorder the best hits with the server's reranker (if it has one)", strict=True)
]
