from django.contrib.auth import views as auth_views
from django.urls import include, path
from shop import views

urlpatterns = [
    path("signup/<str:database>/", views.signup),
    path("signup-async/<str:database>/", views.signup_async),
    path("result/<str:database>/<str:result_id>/", views.result),
    path("accounts/login/", auth_views.LoginView.as_view(template_name="login.html")),
    path("jobs/", include("due.contrib.django.urls")),
]
