"""directory_tree: the sandboxed walk as nested JSON, bounded by depth and size."""

from __future__ import annotations

from contextlib import closing

import msgspec

from .errors import not_a_folder
from .paths import Resolved, Workspace
from .requests import DirectoryTree
from .results import TreeNode, TreeResult
from .walk import Walk

__all__ = ["directory_tree"]


def directory_tree(workspace: Workspace, folder: Resolved, request: DirectoryTree) -> TreeResult:
    """The entries under `folder` (at most `max_entries`, `max_depth` levels deep)
    as a tree; secrets, internals and links leading out are never shown. A folder
    at `max_depth` that holds entries says `truncated`.

    Raises VALIDATION when `folder` is a file.
    """
    if not folder.is_dir:
        raise not_a_folder(folder.path)
    depth = request.max_depth
    # One level further than shown: an entry there marks its folder as cut.
    walk = Walk(
        workspace,
        folder,
        gitignore=request.respect_gitignore,
        exclude=request.exclude,
        max_depth=depth + 1,
    )
    top: list[TreeNode] = []
    # The children list of the folder last seen at each depth; the walk yields a
    # folder before what it holds, in name order.
    levels: list[list[TreeNode]] = [top]
    count = 0
    truncated = False
    with closing(walk.entries()) as entries:
        for entry in entries:
            if entry.depth > depth:
                cut = levels[depth - 1]
                if not cut[-1].truncated:
                    cut[-1] = msgspec.structs.replace(cut[-1], truncated=True)
                continue
            if count == request.max_entries:
                truncated = True
                break
            count += 1
            children: list[TreeNode] | None = [] if entry.is_dir else None
            node = TreeNode(
                name=entry.name,
                type="directory" if entry.is_dir else "file",
                size=entry.size,
                children=children,
            )
            del levels[entry.depth :]
            levels[entry.depth - 1].append(node)
            if children is not None:
                levels.append(children)
    return TreeResult(path=folder.path, tree=top, entries=count, truncated=truncated)
