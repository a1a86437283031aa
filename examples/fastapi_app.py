"""A FastAPI app on SQLAlchemy and asyncpg whose jobs are part of its requests'
transactions.

`POST /signups` writes the user and enqueues the welcome email in one
transaction: a signup that fails (an e-mail address already taken) leaves no
job, and a job never runs for a user who was not saved. `GET /jobs/{id}` shows
a job; the dashboard is mounted under `/jobs-dashboard`, behind a token.

Run it (PostgreSQL; the worker in another terminal), after
`pip install 'due[sqlalchemy,postgres-binary,web]' fastapi uvicorn asyncpg`:

    export DATABASE_URL=postgresql://127.0.0.1:5432/shop DASHBOARD_TOKEN=a-long-secret
    due --app fastapi_app:jobs migrate
    uvicorn fastapi_app:web
    due --app fastapi_app:jobs worker
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy import String
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import due

DATABASE_URL = os.environ["DATABASE_URL"]  # postgresql://host:port/database

# One database for the app's rows and its jobs: due's own connections (psycopg)
# and the app's (SQLAlchemy on asyncpg) reach it by the same URL.
jobs = due.App(DATABASE_URL)
# asyncpg takes no libpq parameters (sslmode=...): give them as its connect_args.
engine = create_async_engine(make_url(DATABASE_URL).set(drivername="postgresql+asyncpg", query={}))
sessions = async_sessionmaker(engine, expire_on_commit=False)


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)


@jobs.task(queue="emails", retry=due.Retry(max_attempts=5, backoff="10s"))
def send_welcome_email(email: str) -> str:
    return f"welcome email sent to {email}"


@asynccontextmanager
async def lifespan(web: FastAPI) -> AsyncIterator[None]:
    # Tables made here to keep the example short; a real app migrates first
    # (`due migrate`, and its own migrations: Alembic's).
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    jobs.open()  # due's connections, its schema checked: a problem fails the start
    yield
    jobs.close()
    await engine.dispose()


web = FastAPI(lifespan=lifespan)
web.mount("/jobs-dashboard", jobs.dashboard(token=os.environ["DASHBOARD_TOKEN"]))


async def session() -> AsyncIterator[AsyncSession]:
    async with sessions() as opened:
        yield opened


Session = Annotated[AsyncSession, Depends(session)]


class Signup(BaseModel):
    email: str


@web.post("/signups", status_code=201)
async def sign_up(signup: Signup, db: Session) -> dict[str, Any]:
    user = User(email=signup.email)
    db.add(user)
    # Written in the session's transaction: it exists if and only if the commit does.
    job = await send_welcome_email.options(connection=db).aenqueue(signup.email)
    try:
        await db.commit()  # the user's INSERT: an address already taken fails here,
    except IntegrityError:  # and the job goes with it
        await db.rollback()
        raise HTTPException(409, f"{signup.email} has already signed up") from None
    return {"user_id": user.id, "job_id": job.id}


@web.get("/jobs/{job_id}")
def show_job(job_id: int) -> dict[str, Any]:  # a plain def: FastAPI runs it in a thread
    try:
        job = jobs.get(job_id)
    except due.JobNotFoundError:
        raise HTTPException(404, f"no job {job_id}") from None
    return {"id": job.id, "task": job.task, "state": job.state.value, "result": job.result}
