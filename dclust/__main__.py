"""``python -m dclust``: the command line (the same app as the ``dclust`` entry point)."""

from dclust._cli.main import app

if __name__ == "__main__":
    app(prog_name="dclust")
