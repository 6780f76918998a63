"""`tpujob ui`: the local web dashboard."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def ui(port: int = typer.Option(8765, "--port", help="Port to listen on (0: a free one)."),
           host: str = typer.Option("127.0.0.1", "--host",
                                    help="Address to listen on; one other machines reach needs --token."),
           token: str | None = typer.Option(None, "--token", envvar="TPUJOB_UI_TOKEN",
                                               help="The access token (default: a random one, printed)."),
           open_: bool = typer.Option(False, "--open", help="Open the page in a web browser.")):
        """Serve a web dashboard of the jobs (timelines, training curves, logs, cancel/resume/
        delete) until Ctrl-C. Every page needs the token in the URL printed at start."""
        from tpujob.ui.server import Dashboard

        dashboard = Dashboard(host=host, port=port, token=token)
        dashboard.bind()
        typer.echo(f"tpujob ui: serving the dashboard at\n    {dashboard.url}\n(Ctrl-C stops it)")
        if open_:
            import webbrowser

            webbrowser.open(dashboard.url)
        try:
            dashboard.serve()
        except KeyboardInterrupt:
            pass
