"""The course's tools for instructors and authors, beside the learner's library ``attnlib``.

==========================  ==================================================================
``coursetools.homework``    ``python -m coursetools.homework release|grade|marks|export-nbgrader|export-otter``:
                            student versions of the chapters (solutions removed, answer cells
                            for written exercises), honest grading, the marks of written answers
``coursetools.chapters``    reading a chapter or a submission: its coding and written exercises
``coursetools.grade``       one submission in a fresh kernel, each exercise graded in the grader's process
``coursetools.gradebook``   a class: student ids, the gradebook written as it goes, CSV, feedback pages
``coursetools.exports``     the chapters as an nbgrader course and as Otter-Grader master notebooks
``coursetools.translate``   the Chinese edition's notebooks: markdown from the book's catalogs in
                            ``locales/`` (``python -m coursetools.translate SRC DEST``)
==========================  ==================================================================

``attnlib`` holds what the chapters build and never imports this package. The tools need
nbformat, nbclient, ipykernel and polib (``requirements.txt``, or ``pip install
"attnlib[tools]"``); the grader's report is in the language of ``ATTNLIB_LANG``, from
attnlib's catalog (``attnlib.i18n``).
"""
